"""End-to-end and collective-linking benchmark (issue 4) on BC5CDR dev vs all MeSH records.

    python benchmarks/e2e.py [--encoder training/bench/pb_mixed50/best]

1. Gold spans, linked one mention at a time (marked-up inputs) vs collectively (one pass per
   document), same encoder: recall@1/@64 and mentions/s in one run.
2. End to end: the span scorer is trained on BC5CDR train (frozen encoder token vectors), γ chosen
   on dev documents 0-249; strict/partial P/R/F1 reported on dev documents 250-499.
Writes benchmarks/e2e.json and benchmarks/e2e.md.
"""
import json
import time
from pathlib import Path
from typing import Optional

import spacy
import typer

from spacy_pel.corpora import bare_doc, read_docbin
from spacy_pel.evaluation.linking import e2e_metrics, mention_table, metrics
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.span_scorer import train_span_scorer

HERE = Path(__file__).resolve().parent


def main(kb: Path = typer.Option(Path("kbs/mesh")), dev: Path = typer.Option(Path("corpus/bc5cdr_dev.spacy")),
         train: Path = typer.Option(Path("corpus/bc5cdr_train.spacy")),
         encoder: Optional[str] = typer.Option(None, help="Encoder folder (default: the untrained base)"),
         work: Path = typer.Option(Path("training/e2e"))):
    nlp = spacy.blank("en")
    dev_docs, train_docs = read_docbin(nlp, dev), read_docbin(nlp, train)
    index = EntityIndex.from_disk(kb)
    enc = BiEncoder.from_pretrained(encoder) if encoder else BiEncoder.from_pretrained()
    report = {"encoder": encoder or "all-MiniLM-L6-v2 (untrained)", "gold_spans": {}}
    for mode in ("single", "collective"):
        vectors = {"@misc": "spacy_pel.vectors.collective.v1" if mode == "collective" else "spacy_pel.vectors.per_mention.v1"}
        linker = nlp.add_pipe("pel_linker", name=mode, config={"vectors": vectors})
        linker.set_resources(enc, index)
        rows, seconds = mention_table(linker, dev_docs, progress=True)
        m = metrics(rows, seconds, index.row)
        report["gold_spans"][mode] = {"R@1": m["recall_in_kb"]["R@1"], "R@64": m["recall_in_kb"]["R@64"],
                                      "mentions": m["mentions"], "seconds": m["seconds"], "mentions_per_s": m["mentions_per_s"]}
    half = len(dev_docs) // 2
    spans = train_span_scorer(enc, train_docs, dev_docs[:half], work, progress=True)
    report["span_scorer"] = spans
    e2e = spacy.blank("en")
    finder = {"@misc": "spacy_pel.mentions.span_finder.v1", "threshold": spans["threshold"],
              "scorer": str(work / "span_scorer.safetensors")}
    linker = e2e.add_pipe("pel_linker", config={"mentions": finder, "vectors": {"@misc": "spacy_pel.vectors.collective.v1"}})
    linker.set_resources(enc, index)
    test = dev_docs[half:]
    raw = [bare_doc(d, e2e.vocab) for d in test]
    t0 = time.perf_counter()
    predicted = list(e2e.pipe(raw, batch_size=32))
    seconds = time.perf_counter() - t0
    report["e2e"] = {**e2e_metrics(predicted, test), "docs": len(test), "seconds": round(seconds, 1),
                     "mentions_per_s": round(sum(len(d.ents) for d in predicted) / seconds, 1)}
    (HERE / "e2e.json").write_text(json.dumps(report, indent=2))
    g, e = report["gold_spans"], report["e2e"]
    md = [
        "# End-to-end spans and collective linking: BC5CDR dev vs all 354,068 MeSH records",
        "",
        f"Reproduce: `python benchmarks/e2e.py{' --encoder ' + encoder if encoder else ''}`. Encoder: {report['encoder']}; 2-core CPU, one run.",
        "",
        "## Gold spans: one mention at a time vs one pass per document",
        "",
        "| mode | R@1 | R@64 | mentions | seconds | mentions/s |",
        "|---|---:|---:|---:|---:|---:|",
        *[f"| {k} | {v['R@1']:.3f} | {v['R@64']:.3f} | {v['mentions']} | {v['seconds']} | {v['mentions_per_s']} |" for k, v in g.items()],
        "",
        f"Speed-up of collective linking: {g['collective']['mentions_per_s'] / g['single']['mentions_per_s']:.1f}×.",
        "",
        "## End to end (no NER): span scorer + collective linking",
        "",
        f"Span scorer trained on BC5CDR train over frozen token vectors; γ = {spans['threshold']} chosen on dev docs 0-{half - 1} "
        f"(span-only strict F1 there {spans['dev_span_strict']['f']:.3f}); reported on dev docs {half}-{len(dev_docs) - 1}.",
        "",
        "| | P | R | F1 |",
        "|---|---:|---:|---:|",
        f"| strict (span + id) | {e['strict']['p']:.3f} | {e['strict']['r']:.3f} | {e['strict']['f']:.3f} |",
        f"| partial (overlap + id) | {e['partial']['p']:.3f} | {e['partial']['r']:.3f} | {e['partial']['f']:.3f} |",
        "",
        f"{e['predicted']} predicted / {e['gold']} gold linked mentions; {e['docs']} documents in {e['seconds']} s "
        f"({e['mentions_per_s']} predicted mentions/s). Paper (BioBERT, jointly trained, GPU): strict F1 0.738 on BC5CDR test.",
        "",
    ]
    (HERE / "e2e.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    typer.run(main)
