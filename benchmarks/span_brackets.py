"""Spans that cut through a bracket pair (``HBV) infection``, ``deficiency (class III``) left out of the
span finder's candidates (:func:`spacy_pel.models.doc_encoder.bracket_balanced`), against the finder as
it was (every span of ≤ ``max_span_len`` tokens a candidate).

Each case loads an e2e pipeline as its workflow assembled it and links the raw text of a dev corpus
(tokenized as a user's text is), scored by :func:`spacy_pel.evaluation.linking.e2e_metrics`; the
"before" arm replaces the bracket rule by one that keeps every span, in the same process.

    python benchmarks/span_brackets.py --case "NAME=PIPELINE=CORPUS" … --output span_brackets
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import numpy as np
import spacy
import typer

from _common import HERE, e2e_arms_table, invocation, lscpu_model, machine, machine_line
from e2e_pipeline import run as run_pipeline  # load, warm up, link the raw text, score (benchmarks/ is on the path)
from spacy_pel.corpora import read_docbin
from spacy_pel.pipeline import mentions

ARMS = {"every span (before)": lambda doc, starts, ends: np.ones(len(starts), dtype=bool),
        "no span cutting through brackets": mentions.bracket_balanced}


def markdown(r: dict) -> str:
    lines = ["# The span finder without spans that cut through brackets", "", f"{machine_line(r['machine'])}.",
             f"Reproduce: `{r['command']}`.", ""] + e2e_arms_table(r["cases"], "span finder")
    return "\n".join(lines + ["", r["notes"], ""] if r.get("notes") else lines + [""])


def main(case: List[str] = typer.Option(..., help="NAME=PIPELINE=CORPUS (an e2e pipeline and a gold .spacy corpus)"),
         output: str = typer.Option("span_brackets"), notes: str = typer.Option("")):
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "notes": notes, "cases": {}}
    for spec in case:
        name, pipeline, corpus = spec.split("=")
        docs = read_docbin(spacy.blank("en"), corpus)
        report["cases"][name] = {}
        for arm, rule in ARMS.items():
            mentions.bracket_balanced = rule
            m = run_pipeline(Path(pipeline), docs, tokenize=True)
            report["cases"][name][arm] = {k: m[k] for k in ("strict", "span", "predicted", "docs", "seconds")}
        mentions.bracket_balanced = ARMS["no span cutting through brackets"]
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
