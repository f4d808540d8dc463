"""Issue 28: teach the encoder the KB (self-alignment), then let both towers learn from mentions.

Runs the chain step by step (each step is skipped when its output exists, so a cut run resumes),
times every step, and writes benchmarks/encoder_adapt.{json,md}:

1. ``adapt``       python -m spacy_pel adapt on all of MeSH's names (configs/adapt.cfg);
2. ``kb_adapted``  the KB encoded by the adapted encoder (for the "adapted alone" row only);
3. ``train``       both towers from the adapted encoder on BC5CDR train (configs/train_both.cfg);
4. ``kb`` / ``names``  the KB and name rows encoded once, by the final entity tower;
5. ``aliases`` / ``pipeline``  as ``spacy project run all`` assembles them (configs/linker_rules.cfg).

Figures: held-out synonym R@1 (base vs adapted); the retriever alone (no rules, no name rows) on BC5CDR
dev gold mentions vs all MeSH, context 64 -- base (from benchmarks/retriever.md), adapted alone, final;
the pipeline's figures come from ``benchmarks/accuracy.py --pipeline training/pipeline_both``.

    python benchmarks/encoder_adapt.py                      # every step not yet done, then the report
    python benchmarks/encoder_adapt.py --steps report       # the report only
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import spacy
import typer

from _common import machine  # noqa: E402

from spacy_pel.corpora import corpus_ids, read_docbin  # noqa: E402
from spacy_pel.evaluation.linking import canonical_ids, mention_table, metrics  # noqa: E402
from spacy_pel.kb import read_kb  # noqa: E402
from spacy_pel.models.encoder import BiEncoder  # noqa: E402
from spacy_pel.retrieval.index import EntityIndex  # noqa: E402
from spacy_pel.training.adapt import KBNames, SynonymEvaluator, split_entities  # noqa: E402
from spacy_pel.training.adapt_config import AdaptConfig  # noqa: E402
from spacy_pel.training.config import load_config  # noqa: E402

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
              "--config configs/adapt.cfg --max-minutes {adapt_minutes}"),
    "kb_adapted": ("kbs/mesh_adapted", f"{PY} -m spacy_pel build-kb --kb {MESH} --format mesh --encoder training/adapted "
                   "--output kbs/mesh_adapted"),
    "train": ("training/retriever_both/best", f"{PY} -m spacy_pel train configs/train_both.cfg --output training/retriever_both "
              f"--paths.kb {MESH} --encoder.base training/adapted {{train_overrides}}"),
    "kb": ("kbs/mesh_both", f"{PY} -m spacy_pel build-kb --kb {MESH} --format mesh --encoder training/retriever_both/best "
           "--output kbs/mesh_both"),
    "names": ("kbs/mesh_both_names", f"{PY} -m spacy_pel build-names kbs/mesh_both --output kbs/mesh_both_names"),
    "aliases": ("training/aliases.json", f"{PY} -m spacy_pel aliases corpus/bc5cdr_train.spacy --output training/aliases.json"),
    "pipeline": ("training/pipeline_both", f"{PY} -m spacy assemble configs/linker_rules.cfg training/pipeline_both "
                 "--paths.kb kbs/mesh_both --paths.encoder training/retriever_both/best --paths.aliases training/aliases.json "
                 "--paths.names kbs/mesh_both_names --components.pel_linker.context_window 64"),
}
EVALS = {"alone_adapted": ("training/adapted", "kbs/mesh_adapted"), "alone_final": ("training/retriever_both/best", "kbs/mesh_both")}


def run_step(name: str, report: dict, **values) -> None:
    output, command = STEPS[name]
    if (ROOT / output).exists():
        return
    command = command.format(**values)
    t0 = time.perf_counter()
    subprocess.run(command, shell=True, check=True, cwd=ROOT)
    report.setdefault("steps", {})[name] = {"minutes": round((time.perf_counter() - t0) / 60, 1), "command": command}


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


def synonym_r1(cfg: AdaptConfig) -> dict:
    """Held-out synonym R@1 (the adapt run's own evaluation) of the base and the adapted encoder."""
    names = KBNames(read_kb(cfg.kb.path, cfg.kb.format))
    _, held = split_entities(names, cfg.training.eval_entities, cfg.training.seed)
    evaluator = SynonymEvaluator(names, held, cfg.training.eval_pool, cfg.encoder.max_length, cfg.training.seed)
    return {"base": evaluator(BiEncoder.from_pretrained(cfg.encoder.base))["synonym_r1"],
            "adapted": evaluator(BiEncoder.from_pretrained(ROOT / "training" / "adapted"))["synonym_r1"]}


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = ["# Issue 28: the encoder taught the KB (self-alignment), both towers trained from mentions",
             "", f"Machine: {m['cpu']} ({', '.join(m['flags'])}), torch {m['torch']}, {m['torch_threads']} threads; "
             "step times as the notes below say (alone or beside other work).", "Reproduce: `python benchmarks/encoder_adapt.py` (then "
             "`python benchmarks/accuracy.py --pipeline training/pipeline_both …` for the pipeline figures).", ""]
    a = r.get("adapt")
    if a:
        lines += ["## Self-alignment on MeSH's names (no annotated text)", "",
                  f"{a['steps']} steps × {a['batch']} in {a['minutes']:.1f} min ({a['names']:,} names of {a['entities']:,} "
                  f"entities; {a['train_entities']:,} entities with ≥ 2 names trained on, {a['held_out']} held out).", "",
                  "| held-out synonym R@1 (a synonym finds its entity's name among the held-out names + 20,000 others) | base MiniLM | adapted |",
                  "|---|---:|---:|", f"| | {a['synonym_r1']['base']:.3f} | {a['synonym_r1']['adapted']:.3f} |", "",
                  "History (step: synonym R@1): " + ", ".join(f"{h['step']}: {h.get('synonym_r1', float('nan')):.3f}"
                                                             for h in a["history"]), ""]
    rows = [(k, v) for k, v in BEFORE.items()] + [(k, r[k]) for k in EVALS if k in r]
    lines += ["## The retriever alone (no rules, no name rows): BC5CDR dev gold mentions vs all MeSH, context 64", "",
              "| encoder | R@1 | unseen R@1 | seen R@1 | R@64 |", "|---|---:|---:|---:|---:|"]
    label = {"alone_adapted": "adapted encoder alone (no mention training)",
             "alone_final": "adapted, then both towers trained on BC5CDR train (configs/train_both.cfg)"}
    for k, v in rows:
        lines.append(f"| {label.get(k, k)} | {v['R@1']:.3f} | {v['unseen']:.3f} | "
                     f"{v.get('seen', float('nan')):.3f} | {v.get('R@64', float('nan')):.3f} |")
    lines += ["", "(base and round-2 rows: benchmarks/retriever.md, same evaluation.)", "", "## Step times", "",
              "| step | minutes | command |", "|---|---:|---|"]
    for k, v in r.get("steps", {}).items():
        lines.append(f"| {k} | {v['minutes']} | `{v['command'].replace(str(ROOT.parent), '..')}` |")
    if r.get("notes"):
        lines += ["", r["notes"]]
    return "\n".join(lines) + "\n"


def main(steps: List[str] = typer.Option(list(STEPS) + list(EVALS) + ["synonyms", "report"], help="What to do"),
         adapt_minutes: float = typer.Option(15.0), train_overrides: str = typer.Option("--training.epochs 1"),
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
            run_step(name, report, adapt_minutes=adapt_minutes, train_overrides=train_overrides)
            save()
    if "synonyms" in steps:
        raw = load_config(ROOT / "configs" / "adapt.cfg", {"kb.path": str(MESH), "kb.format": "mesh"})
        cfg = AdaptConfig.from_config(raw)  # the run's evaluation settings (seed, held-out entities, pool)
        log = json.loads((ROOT / "training" / "adapted" / "adapt_log.json").read_text())
        report["adapt"] = {"steps": log["step"], "batch": f"{cfg.training.batch_pairs} pairs + {cfg.negatives.per_batch} hard names",
                           "minutes": log["train_seconds"] / 60, "names": log["names"], "entities": log["entities"],
                           "train_entities": log["train_pairs_entities"], "held_out": cfg.training.eval_entities,
                           "history": log["history"], "synonym_r1": synonym_r1(cfg)}
        save()
    for name, (encoder, kb) in EVALS.items():
        if name in steps and (ROOT / kb).exists():
            report[name] = retriever_alone(encoder, kb)
            save()
    save()


if __name__ == "__main__":
    typer.run(main)
