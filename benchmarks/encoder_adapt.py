"""Issue 28: teach the encoder the KB (self-alignment), then train the mention tower from it.

Runs the chain step by step (each step is skipped when its output exists, so a cut run resumes),
times every step, and writes benchmarks/encoder_adapt.{json,md}:

1. ``adapt``       python -m spacy_pel adapt on all of MeSH (configs/adapt.cfg: a KB synonym as a marked
                   mention vs its entity's KB row, both towers, shared negatives; no annotated text);
2. ``kb_adapted``  the KB encoded once by the adapted entity tower;
3. ``train``       the mention tower trained on BC5CDR train from the adapted encoder, the adapted entity
                   tower frozen (the `all` workflow's recipe), so the KB of step 2 is the final one;
4. ``names``       the name rows, encoded by the same entity tower;
5. ``aliases`` / ``pipeline``  as ``spacy project run all`` assembles them (configs/linker_rules.cfg).

Figures: the retriever alone (no rules, no name rows) on BC5CDR dev gold mentions vs all MeSH, context
64 -- base (from benchmarks/retriever.md), adapted alone, adapted + mention training; the adapt run's
held-out synonym R@1; the pipeline's figures come from ``benchmarks/accuracy.py --pipeline
training/pipeline_adapted --output benchmarks/accuracy_adapted``.

    python benchmarks/encoder_adapt.py                      # every step not yet done, then the report
    python benchmarks/encoder_adapt.py --steps report       # the report only
"""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import List

import spacy
import typer

from _common import machine, run_timed  # noqa: E402
from spacy_pel.corpora import corpus_ids, read_docbin  # noqa: E402
from spacy_pel.evaluation.linking import canonical_ids, mention_table, metrics  # noqa: E402
from spacy_pel.models.encoder import BiEncoder  # noqa: E402
from spacy_pel.retrieval.index import EntityIndex  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "benchmarks"
MESH = ROOT.parent / "shared" / "data" / "mesh"
PY = shlex.quote(sys.executable)
# the retriever alone before this issue (benchmarks/retriever.md: "untrained" = base MiniLM, both towers;
# "ce_cosine_mixed50_3ep" = the `all` workflow's retriever, mention tower trained, entity tower frozen)
BEFORE = {"base MiniLM, no training": {"R@1": 0.288, "unseen": 0.362, "seen": 0.268, "R@64": 0.698},
          "round-2 retriever (mention tower only, 3 epochs)": {"R@1": 0.824, "unseen": 0.606, "seen": 0.881, "R@64": 0.934}}
STEPS = {
    "adapt": ("training/adapted", f"{PY} -m spacy_pel adapt {MESH} --format mesh -o training/adapted "
              "--config configs/adapt.cfg --max-minutes {adapt_minutes} {adapt_overrides}"),
    "kb_adapted": ("kbs/mesh_adapted", f"{PY} -m spacy_pel build-kb --kb {MESH} --format mesh --encoder training/adapted "
                   "--output kbs/mesh_adapted"),
    "train": ("training/retriever_adapted/best", f"{PY} -m spacy_pel train configs/train_pb_random.cfg "
              "--output training/retriever_adapted --paths.kb kbs/mesh_adapted --encoder.base training/adapted "
              "--encoder.mention_max_length 64 --encoder.entity_max_length 32 {train_overrides}"),  # the adapted KB's length
    "names": ("kbs/mesh_adapted_names", f"{PY} -m spacy_pel build-names kbs/mesh_adapted --output kbs/mesh_adapted_names"),
    "aliases": ("training/aliases.json", f"{PY} -m spacy_pel aliases corpus/bc5cdr_train.spacy --output training/aliases.json"),
    "pipeline": ("training/pipeline_adapted", f"{PY} -m spacy assemble configs/linker_rules.cfg training/pipeline_adapted "
                 "--paths.kb kbs/mesh_adapted --paths.encoder training/retriever_adapted/best --paths.aliases training/aliases.json "
                 "--paths.names kbs/mesh_adapted_names --components.pel_linker.context_window 64"),
}
EVALS = {"alone_adapted": ("training/adapted", "kbs/mesh_adapted"),
         "alone_final": ("training/retriever_adapted/best", "kbs/mesh_adapted")}
# the `all` workflow's retriever recipe (project.yml, vars.train_overrides), with bf16 autocast where the
# CPU has it (precision auto, as adapt and build-kb run; the recipe's own is fp32): step times in the report
TRAIN_OVERRIDES = ("--loss.name ce_cosine --negatives.hard_fraction 0.5 --training.lr 0.00005 --training.epochs 3 "
                   "--training.precision auto")


def run_step(name: str, report: dict, steps: dict = STEPS, **values) -> None:
    output, command = steps[name]
    if (ROOT / output).exists():
        return
    command = command.format(**values)
    report.setdefault("steps", {})[name] = {"minutes": run_timed(command), "command": command}


def retriever_alone(encoder: str, kb: str, context: int = 64) -> dict:
    """Every BC5CDR dev gold mention linked by the encoder against the KB: no rules, no name rows."""
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"context_window": context})
    linker.set_resources(BiEncoder.from_pretrained(ROOT / encoder), EntityIndex.from_disk(ROOT / kb))
    docs = read_docbin(nlp, ROOT / "corpus" / "bc5cdr_dev.spacy")
    train_ids = canonical_ids(linker, corpus_ids(read_docbin(nlp, ROOT / "corpus" / "bc5cdr_train.spacy")))
    rows, seconds = mention_table(linker, docs, progress=True)
    m = metrics(rows, seconds, linker.index.row, train_ids)
    return {"R@1": m["recall_in_kb"]["R@1"], "R@64": m["recall_in_kb"]["R@64"], "unseen": m["recall_unseen"]["R@1"],
            "seen": m["recall_seen"]["R@1"], "mentions_per_s": m["mentions_per_s"]}


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = ["# Issue 28: the encoder taught the KB (self-alignment), both towers trained from mentions",
             "", f"Machine: {m['cpu']} ({', '.join(m['flags'])}), torch {m['torch']}, {m['torch_threads']} threads; "
             "step times as the notes below say (alone or beside other work).", "Reproduce: `python benchmarks/encoder_adapt.py` (then "
             "`python benchmarks/accuracy.py --pipeline training/pipeline_adapted --output benchmarks/accuracy_adapted …` for the pipeline figures).", ""]
    a = r.get("adapt")
    if a:
        lines += ["## Self-alignment on MeSH (no annotated text)", "",
                  f"{a['step']} steps of 32 (synonym, entity) pairs in {a['train_seconds'] / 60:.1f} min of training; "
                  f"best at step {a['best_step']}. Held-out synonym R@1 (a synonym of one of 1,000 held-out entities, as a "
                  "marked mention, finds its entity among them + 5,000 sampled KB rows re-encoded by the entity tower): "
                  + ", ".join(f"step {h['step']}: {h.get('dev_r1', float('nan')):.3f}" for h in a["history"]), ""]
    rows = [(k, v) for k, v in BEFORE.items()] + [(k, r[k]) for k in EVALS if k in r]
    if r.get("names_objective", {}).get("alone"):
        rows.insert(2, ("name-pair objective, adapted alone (--objective names, 468 steps; earlier session)",
                        r["names_objective"]["alone"]))
    label = {"alone_adapted": "adapted encoder alone (no mention training)",
             "alone_final": "adapted, then the mention tower trained on BC5CDR train (adapted entity tower frozen)"}
    lines += retriever_table([(label.get(k, k), v) for k, v in rows], "base and round-2 rows") + step_times(r)
    return "\n".join(lines) + "\n"


def retriever_table(rows: list, cited: str) -> List[str]:
    """The report's table of the retriever alone: (label, figures) rows; ``cited`` names the rows
    taken from benchmarks/retriever.md."""
    lines = ["## The retriever alone (no rules, no name rows): BC5CDR dev gold mentions vs all MeSH, context 64", "",
             "| encoder | R@1 | unseen R@1 | seen R@1 | R@64 |", "|---|---:|---:|---:|---:|"]
    for k, v in rows:
        lines.append(f"| {k} | {v['R@1']:.3f} | {v['unseen']:.3f} | "
                     f"{v.get('seen', float('nan')):.3f} | {v.get('R@64', float('nan')):.3f} |")
    return lines + ["", f"({cited}: benchmarks/retriever.md, same evaluation.)", ""]


def step_times(r: dict) -> List[str]:
    """The report's step-time table (the chain's commands, paths shown relative to the project) and its notes."""
    lines = ["## Step times", "", "| step | minutes | command |", "|---|---:|---|"]
    for k, v in r.get("steps", {}).items():
        lines.append(f"| {k} | {v['minutes']} | `{v['command'].replace(str(ROOT.parent), '..')}` |")
    return lines + (["", r["notes"]] if r.get("notes") else [])


def main(steps: List[str] = typer.Option(list(STEPS) + list(EVALS) + ["synonyms", "report"], help="What to do"),
         adapt_minutes: float = typer.Option(20.0), adapt_overrides: str = typer.Option(""),
         train_overrides: str = typer.Option(TRAIN_OVERRIDES),
         notes: str = typer.Option("")):
    out = HERE / "encoder_adapt.json"
    report = json.loads(out.read_text()) if out.exists() else {}
    report["machine"] = machine()
    if notes:
        report["notes"] = notes

    def save():
        out.write_text(json.dumps(report, indent=2), encoding="utf8")
        out.with_suffix(".md").write_text(markdown(report), encoding="utf8")

    for name in STEPS:
        if name in steps:
            run_step(name, report, adapt_minutes=adapt_minutes, adapt_overrides=adapt_overrides,
                     train_overrides=train_overrides)
            save()
    if "synonyms" in steps and (ROOT / "training" / "adapted" / "adapt_log.json").exists():
        report["adapt"] = json.loads((ROOT / "training" / "adapted" / "adapt_log.json").read_text())
        save()
    for name, (encoder, kb) in EVALS.items():
        if name in steps and (ROOT / kb).exists():
            report[name] = retriever_alone(encoder, kb)
            save()
    save()


if __name__ == "__main__":
    typer.run(main)
