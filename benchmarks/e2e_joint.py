"""Jointly trained end-to-end model vs the single-mention retriever (issue 4), BC5CDR dev vs all MeSH.

    python benchmarks/e2e_joint.py          # after benchmarks/retriever.py (uses its ce_mixed50 run)

Comparable training: the single-mention retriever is `ce_mixed50` of benchmarks/retriever.py (CE,
32 negatives of which 50% hard, lr 5e-5, 120 steps × 32 marked-up mentions = 3,840 mentions). The
joint model trains from the same base encoder with the same loss, negatives and lr on whole
documents (`configs/train_e2e.cfg`): STEPS steps × 4 documents ≈ the same number of gold mentions,
plus the span loss. Both encoders then link all dev gold spans one mention at a time and
collectively (one pass per document), in one run; the joint model also runs end to end (its span
scorer, γ chosen on dev docs 0-99 during training) on dev docs 250-499.
Writes benchmarks/e2e_joint.json and benchmarks/e2e_joint.md.
"""
import json
import time
from pathlib import Path

import spacy
import typer

from _common import BUDGET
from spacy_pel.corpora import bare_doc, read_docbin
from spacy_pel.evaluation.linking import e2e_metrics, mention_table, metrics
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.joint import train_e2e

HERE = Path(__file__).resolve().parent
CONFIG = HERE.parent / "configs" / "train_e2e.cfg"
STEPS = 50
SETTINGS = {"training.max_steps": STEPS, "training.batch_docs": 4, "training.lr": BUDGET["training.lr"],
            "training.eval_every": 25, "training.eval_docs": 100, "loss.name": "ce", "negatives.kind": "sampled",
            "negatives.count": BUDGET["negatives.count"], "negatives.hard_fraction": 0.5}


def main(kb: Path = typer.Option(Path("kbs/mesh")), dev: Path = typer.Option(Path("corpus/bc5cdr_dev.spacy")),
         train: Path = typer.Option(Path("corpus/bc5cdr_train.spacy")),
         single: Path = typer.Option(Path("training/bench/ce_mixed50/best"), help="Single-mention retriever"),
         work: Path = typer.Option(Path("training/bench/e2e_joint"))):
    settings = {**SETTINGS, "paths.kb": str(kb), "paths.dev": str(dev), "paths.train": str(train)}
    t0 = time.perf_counter()
    state = train_e2e(CONFIG, work, settings)
    wall = time.perf_counter() - t0
    log = json.loads((work / "train_log.json").read_text())
    nlp = spacy.blank("en")
    dev_docs = read_docbin(nlp, dev)
    index = EntityIndex.from_disk(kb)
    context = BUDGET["encoder.mention_max_length"]
    report = {"joint_training": {"steps": state["step"], "wall_s": round(wall, 1), "train_seconds": round(state["train_seconds"], 1),
                                 "best_step": state["best_step"], "span_report": log.get("span_report"), "settings": SETTINGS},
              "gold_spans": {}}
    for label, enc_dir in (("single-mention retriever (ce_mixed50)", single), ("joint e2e model", work / "best")):
        enc = BiEncoder.from_pretrained(enc_dir)
        for mode in ("single", "collective"):
            linker = nlp.add_pipe("pel_linker", name=f"{mode}_{len(report['gold_spans'])}",
                                  config={"vectors": {"@misc": f"spacy_pel.vectors.{'collective' if mode == 'collective' else 'per_mention'}.v1"},
                                          "context_window": context})
            linker.set_resources(enc, index)
            rows, seconds = mention_table(linker, dev_docs, progress=True)
            m = metrics(rows, seconds, index.row)
            report["gold_spans"][f"{label} | {mode}"] = {
                "R@1": m["recall_in_kb"]["R@1"], "R@64": m["recall_in_kb"]["R@64"], "mentions": m["mentions"],
                "seconds": m["seconds"], "mentions_per_s": m["mentions_per_s"]}
    gamma = log["span_report"]["threshold"]
    e2e = spacy.blank("en")
    finder = {"@misc": "spacy_pel.mentions.span_finder.v1", "threshold": None,
              "scorer": str(work / "best" / "span_scorer.safetensors")}
    linker = e2e.add_pipe("pel_linker", config={"mentions": finder, "vectors": {"@misc": "spacy_pel.vectors.collective.v1"},
                                                "context_window": context})
    linker.set_resources(BiEncoder.from_pretrained(work / "best"), index)
    half = len(dev_docs) // 2
    test = dev_docs[half:]
    raw = [bare_doc(d, e2e.vocab) for d in test]
    t0 = time.perf_counter()
    predicted = list(e2e.pipe(raw, batch_size=32))
    seconds = time.perf_counter() - t0
    report["e2e"] = {**e2e_metrics(predicted, test), "gamma": gamma, "docs": len(test), "seconds": round(seconds, 1),
                     "mentions_per_s": round(sum(len(d.ents) for d in predicted) / seconds, 1)}
    (HERE / "e2e_joint.json").write_text(json.dumps(report, indent=2))
    g, e, j = report["gold_spans"], report["e2e"], report["joint_training"]
    md = [
        "# Jointly trained end-to-end model vs the single-mention retriever: BC5CDR dev vs all 354,068 MeSH records",
        "",
        "Reproduce: `python benchmarks/e2e_joint.py` (after `benchmarks/retriever.py`). 2-core CPU, one run.",
        "",
        f"Comparable training from all-MiniLM-L6-v2, frozen entity tower, CE with {BUDGET['negatives.count']} negatives "
        f"(50% hard), lr {BUDGET['training.lr']}: the single-mention retriever saw 120 × 32 = 3,840 marked-up mentions; the "
        f"joint model {j['steps']} steps × 4 documents (≈ the same number of gold mentions, ~19 per document) through one "
        f"pass per document, with the span loss added ({j['train_seconds'] / 60:.1f} min of training; best step {j['best_step']} "
        "by strict F1 on dev docs 0-99). Mention context for single-mention linking: 64 word pieces.",
        "",
        "## Gold spans: recall@1 and speed",
        "",
        "| encoder | linking | R@1 | R@64 | mentions | seconds | mentions/s |",
        "|---|---|---:|---:|---:|---:|---:|",
        *[f"| {k.split(' | ')[0]} | {k.split(' | ')[1]} | {v['R@1']:.3f} | {v['R@64']:.3f} | {v['mentions']} | {v['seconds']} | {v['mentions_per_s']} |"
          for k, v in g.items()],
        "",
        "## End to end (no NER), joint model",
        "",
        f"γ = {e['gamma']} (best span F1 on dev docs 0-99); reported on dev docs {half}-{len(dev_docs) - 1}.",
        "",
        "| | P | R | F1 |",
        "|---|---:|---:|---:|",
        f"| strict (span + id) | {e['strict']['p']:.3f} | {e['strict']['r']:.3f} | {e['strict']['f']:.3f} |",
        f"| partial (overlap + id) | {e['partial']['p']:.3f} | {e['partial']['r']:.3f} | {e['partial']['f']:.3f} |",
        "",
        f"{e['predicted']} predicted / {e['gold']} gold mentions; {e['docs']} documents in {e['seconds']} s "
        f"({e['mentions_per_s']} predicted mentions/s). Paper (BioBERT, GPU): strict F1 0.738 on BC5CDR test.",
        "",
    ]
    (HERE / "e2e_joint.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    typer.run(main)
