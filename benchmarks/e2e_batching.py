"""Does an end-to-end pipeline give a document the same answers whether it is linked alone or batched
with others? ``nlp(text)`` for each document against ``nlp.pipe(texts, batch_size=64)``: documents whose
found spans, labels or ids differ (decisions), documents whose confidences or candidate scores differ
(in any digit), and strict F1 of each way (scored by
:func:`spacy_pel.evaluation.linking.e2e_metrics`).

    python benchmarks/e2e_batching.py --case "NAME=PIPELINE=CORPUS" … [--docs 100] --output e2e_batching
"""
from __future__ import annotations

import json
from typing import List

import spacy
import typer

from _common import HERE, invocation, lscpu_model, machine, machine_line
from spacy_pel.corpora import read_docbin
from spacy_pel.evaluation.linking import e2e_metrics


def answers(doc) -> list:
    return [(e.start_char, e.end_char, e.label_, e.kb_id_, e._.pel_confidence, e._.pel_candidates) for e in doc.ents]


def decisions(doc) -> list:
    return [(e.start_char, e.end_char, e.label_, e.kb_id_) for e in doc.ents]


def markdown(r: dict) -> str:
    lines = ["# An end-to-end pipeline's answers, one document at a time or batched", "", f"{machine_line(r['machine'])}.",
             f"Reproduce: `{r['command']}`.", "",
             "| case | docs | docs whose decisions differ | docs whose scores differ | strict F1, one at a time | strict F1, batched (64) |",
             "|---|---:|---:|---:|---:|---:|"]
    for case, c in r["cases"].items():
        lines.append(f"| {case} | {c['docs']} | {c['decisions_differ']} | {c['differ']} | {c['alone']['strict']['f']:.4f} | "
                     f"{c['batched']['strict']['f']:.4f} |")
    return "\n".join(lines + ["", r["notes"], ""] if r.get("notes") else lines + [""])


def main(case: List[str] = typer.Option(..., help="NAME=PIPELINE=CORPUS"), docs: int = typer.Option(100),
         output: str = typer.Option("e2e_batching"), notes: str = typer.Option("")):
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "notes": notes, "cases": {}}
    for spec in case:
        name, pipeline, corpus = spec.split("=")
        nlp = spacy.load(pipeline)
        gold = read_docbin(nlp, corpus)[:docs]
        texts = [d.text for d in gold]
        alone = [nlp(t) for t in texts]
        batched = list(nlp.pipe(texts, batch_size=64))
        canonical = nlp.get_pipe("pel_linker").index.canonical
        report["cases"][name] = {"docs": len(texts), "differ": sum(answers(a) != answers(b) for a, b in zip(alone, batched)),
                                 "decisions_differ": sum(decisions(a) != decisions(b) for a, b in zip(alone, batched)),
                                 "alone": e2e_metrics(alone, gold, canonical), "batched": e2e_metrics(batched, gold, canonical)}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
