"""Issue 28 for a user with a KB and no annotated text: MEDIC only, linking NCBI disease dev.

The user has MEDIC (12k diseases with their synonyms) and text to link, but no annotated corpus. What
they can run: ``adapt`` on MEDIC, ``build-kb`` and ``build-names`` with the adapted encoder, and
``configs/linker_rules.cfg`` without an alias table (KB names and synonyms only). This script measures
that beside base MiniLM, every combination of

* encoder: base MiniLM, or ``python -m spacy_pel adapt MEDIC --format medic -o training/adapted_medic
  --max-minutes M`` (configs/adapt.cfg), or (session 35) the same with silver mentions replayed: MEDIC's
  unambiguous names found by ``python -m spacy_pel silver`` in the raw text of NCBI disease train and
  BC5CDR train, their annotations unused (``--paths.train corpus/silver_medic.spacy --synonyms.replay 0.5``);
* mention input: in 64 word pieces of context (``spacy_pel.vectors.per_mention.v1``) or the mention's
  words alone (``spacy_pel.vectors.mention_text.v1``, what ``adapt`` trains on);
* linker: the retriever alone (``configs/linker.cfg``: no rules, no name rows) or the KB-only rules
  (``configs/linker_rules.cfg`` with ``paths.aliases`` null and the KB's name rows);

scored on NCBI disease dev gold mentions (``python -m spacy_pel.evaluate``: in-KB R@1, R@64;
"unseen" = the gold id is absent from NCBI train, which none of these pipelines read). The KB and
its name rows are encoded by each encoder's own entity tower. Every step is resumable (the report
keeps what is done); run alone: the figures include speed.

    python benchmarks/kb_only.py [--minutes 15]     # writes benchmarks/kb_only.{json,md}
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Sequence

import typer

from _common import HERE, ROOT, SHARED, lscpu_model, machine, machine_line, run_timed

MEDIC = SHARED / "ncbi-disease" / "medic_06Jul2012.txt"
DEV, TRAIN = "corpus/ncbi_dev.spacy", "corpus/ncbi_train.spacy"
SILVER_MEDIC = "adapted on MEDIC + silver mentions (raw text)"
ENCODERS = {"base MiniLM": ("all-MiniLM-L6-v2", "kbs/medic_base"), "adapted on MEDIC": ("training/adapted_medic", "kbs/medic_adapted_bench"),
            SILVER_MEDIC: ("training/adapted_medic_silver", "kbs/medic_silver_bench")}
# session 35: MEDIC's unambiguous names found in the raw text of NCBI disease train and BC5CDR train (their
# annotations unused), half renamed by another synonym, replayed as half of every adapt batch in 64 pieces
SILVER_CORPUS = "corpus/silver_medic.spacy"
SILVER = (f"python -m spacy_pel silver {SHARED / 'ncbi-disease' / 'NCBItrainset_corpus.txt'} "
          f"{SHARED / 'bc5cdr' / 'CDR_TrainingSet.PubTator.txt'} --kb {MEDIC} --format medic --swap 0.5 --skip-bad-lines "
          f"-o {SILVER_CORPUS}")
SILVER_OPTIONS = (f" --config configs/adapt.cfg --paths.train {SILVER_CORPUS} --synonyms.replay 0.5 --training.epochs 0"
                  " --encoder.mention_max_length 64")
INPUTS = {"in context (64 pieces)": "spacy_pel.vectors.per_mention.v1", "mention text only": "spacy_pel.vectors.mention_text.v1"}
LINKERS = {"retriever alone": "configs/linker.cfg", "KB-only rules + name rows": "configs/linker_rules.cfg"}
OUT = HERE / "kb_only.json"
BC5CDR_ALIASES = "training/aliases.json"


def run(report: dict, key: str, command: str) -> None:
    """Run ``command`` once (from the repository root), recording its minutes under ``steps[key]``."""
    if key in report["steps"]:
        return
    report["steps"][key] = {"command": command, "minutes": run_timed(command, digits=2)}
    OUT.write_text(json.dumps(report, indent=2), encoding="utf8")


def measure(pipeline: Path, config: str, kb: str, strategy: str, extra: Sequence[str] = ()) -> dict:
    """Assemble ``config`` over ``kb`` and its name rows with the vector ``strategy`` and score it on NCBI dev."""
    metrics = pipeline.with_suffix(".json")
    subprocess.run(["python", "-m", "spacy", "assemble", config, str(pipeline), "--paths.kb", kb, "--paths.names", f"{kb}_names",
                    "--components.pel_linker.context_window", "64", "--components.pel_linker.vectors.@misc", strategy, *extra],
                   check=True, cwd=ROOT)
    subprocess.run(["python", "-m", "spacy_pel.evaluate", DEV, "--pipeline", str(pipeline), "--train", TRAIN, "--output", str(metrics)],
                   check=True, cwd=ROOT)
    m = json.loads(metrics.read_text())
    return {"R@1": m["recall_in_kb"]["R@1"], "unseen": m["recall_unseen"]["R@1"], "R@64": m["recall_in_kb"]["R@64"],
            "mentions_per_s": m["mentions_per_s"]}


def markdown(r: dict) -> str:
    lines = ["# Issue 28: a KB and no annotated text (MEDIC only, NCBI disease dev)", "",
             machine_line(r["machine"]) + "; alone.", "",
             "Reproduce: `python benchmarks/kb_only.py` (its docstring has the protocol). NCBI disease dev gold "
             "mentions in MEDIC; no pipeline here read an annotated corpus (no alias table, no mention training). "
             "Unseen: gold id absent from NCBI train.", "",
             "| encoder | linker | mention input | R@1 | unseen R@1 | R@64 | mentions/s |", "|---|---|---|---:|---:|---:|---:|"]
    for key, x in r["results"].items():
        enc, linker, inp = key.split(" | ")
        lines.append(f"| {enc} | {linker} | {inp} | {x['R@1']:.4f} | {x['unseen']:.4f} | {x['R@64']:.4f} | {x['mentions_per_s']:,.0f} |")
    lines += ["", "| step | minutes | command |", "|---|---:|---|"]
    lines += [f"| {k} | {v['minutes']} | `{v['command']}` |" for k, v in r["steps"].items()]
    if r.get("notes"):
        lines += ["", r["notes"]]
    return "\n".join(lines) + "\n"


def main(minutes: float = typer.Option(15.0, help="adapt's time budget on MEDIC"), notes: str = typer.Option("")):
    report = json.loads(OUT.read_text()) if OUT.exists() else {"steps": {}, "results": {}}
    report["machine"] = {**machine(), "lscpu_model": lscpu_model()}
    if notes:
        report["notes"] = notes
    run(report, "adapt", f"python -m spacy_pel adapt {MEDIC} --format medic -o training/adapted_medic --max-minutes {minutes}")
    run(report, "silver", SILVER)
    run(report, "adapt (silver)", f"python -m spacy_pel adapt {MEDIC} --format medic -o {ENCODERS[SILVER_MEDIC][0]} "
                                  f"--max-minutes {minutes}{SILVER_OPTIONS}")
    for name, (encoder, kb) in ENCODERS.items():
        run(report, f"build-kb ({name})", f"python -m spacy_pel build-kb --kb {MEDIC} --format medic --encoder {encoder} --output {kb}")
        run(report, f"build-names ({name})", f"python -m spacy_pel build-names {kb} --output {kb}_names")
    work = Path("/tmp/pel_kb_only")
    for name, (_, kb) in ENCODERS.items():
        for linker, config in LINKERS.items():
            for inp, strategy in INPUTS.items():
                key = f"{name} | {linker} | {inp}"
                if key in report["results"]:
                    continue
                report["results"][key] = measure(work / key.replace(" | ", "_").replace(" ", "-"), config, kb, strategy)
                OUT.write_text(json.dumps(report, indent=2), encoding="utf8")
    # issue 28's "trained on BC5CDR only, encoder adapted on MEDIC": the KB-only pipeline plus BC5CDR train's
    # surface forms (training/aliases.json of `all`; MeSH ids, which MEDIC's records carry); no mention training
    key = f"adapted on MEDIC | KB-only rules + name rows + BC5CDR train's alias table | {next(reversed(INPUTS))}"
    if key not in report["results"] and (ROOT / BC5CDR_ALIASES).exists():
        report["results"][key] = measure(work / "bc5cdr_aliases", LINKERS["KB-only rules + name rows"], ENCODERS["adapted on MEDIC"][1],
                                         INPUTS["mention text only"], ["--paths.aliases", BC5CDR_ALIASES])
    OUT.write_text(json.dumps(report, indent=2), encoding="utf8")
    OUT.with_suffix(".md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
