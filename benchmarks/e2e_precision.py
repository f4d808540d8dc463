"""What each tower ``precision`` gives an end-to-end pipeline (session 69: the span finder's document pass and
``collective`` vectors now run the precision's tower copy, as per-mention vectors did; before, they ran the fp32
tower whatever the setting, so ``auto`` on a CPU without bf16 — ``int8_rows`` — ran half such a pipeline in fp32).

Each case loads an e2e pipeline as its workflow assembled it with ``precision`` overridden at load, and links the
raw text of a dev corpus (tokenized as a user's text is), scored by
:func:`spacy_pel.evaluation.linking.e2e_metrics`; the time is one pass after a 4-document warm-up.
The ``_before`` report is the same script run from a worktree of the code before the change.

    python benchmarks/e2e_precision.py --case "NAME=PIPELINE=CORPUS" … [--precision fp32 …] --output e2e_precision
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import spacy
import typer

from _common import HERE, e2e_arms_table, invocation, lscpu_model, machine, machine_line, report_footer
from e2e_pipeline import run as run_pipeline  # load, warm up, link the raw text, score (benchmarks/ is on the path)
from spacy_pel.corpora import read_docbin

PRECISIONS = ["fp32", "bf16", "int8_rows", "int8"]


def markdown(r: dict) -> str:
    lines = ["# An end-to-end pipeline in each tower precision", "", f"{machine_line(r['machine'])}.", ""]
    lines += e2e_arms_table(r["cases"], "precision")
    lines += ["", "| case | precision | seconds (one pass) | docs/s |", "|---|---|---:|---:|"]
    lines += [f"| {case} | {arm} | {m['seconds']} | {m['docs_per_s']} |" for case, arms in r["cases"].items() for arm, m in arms.items()]
    return "\n".join(lines + report_footer(r))


def main(case: List[str] = typer.Option(..., help="NAME=PIPELINE=CORPUS (an e2e pipeline and a gold .spacy corpus)"),
         precision: List[str] = typer.Option(PRECISIONS), output: str = typer.Option("e2e_precision"),
         notes: str = typer.Option("")):
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "notes": notes, "cases": {}}
    for spec in case:
        name, pipeline, corpus = spec.split("=")
        docs = read_docbin(spacy.blank("en"), corpus)
        linker = next(n for n, c in spacy.util.load_config(Path(pipeline) / "config.cfg")["components"].items()
                      if c.get("factory") == "pel_linker")
        report["cases"][name] = {p: run_pipeline(Path(pipeline), docs, {f"components.{linker}.precision": p}, tokenize=True)
                                 for p in precision}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
