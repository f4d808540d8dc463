"""The name-rows rule's settings swept on a pipeline's dev corpus (gold mentions, in-KB R@1): are the
defaults (``weight`` 0.5, ``text_weight`` 0.33, ``mode`` mean, from BC5CDR) right for another corpus and KB?
Each setting is a config override at ``spacy.load`` (the config is the source of truth); R@1 is shown
for the whole corpus and for each half of its mentions, so a difference can be read against the noise.

    python benchmarks/names_rule_sweep.py --pipeline training/ncbi_medic_both/pipeline_calibrated \\
        --corpus corpus/ncbi_dev.spacy --output names_rule_sweep_ncbi
"""
from __future__ import annotations

import json
from typing import List

import numpy as np
import spacy
import typer

from _common import HERE, ROOT, invocation, lscpu_model, machine, machine_line
from spacy_pel.corpora import read_docbin
from spacy_pel.evaluation.linking import mention_table
from spacy_pel.pipeline.linker import find_linker

RULE = "components.pel_linker.rules.names"
GRID = [(0.5, 0.33, "mean"), (0.5, 0.0, "mean"), (0.5, 0.5, "mean"), (0.5, 0.66, "mean"), (0.3, 0.33, "mean"),
        (0.7, 0.33, "mean"), (0.5, 0.33, "max")]  # (weight, text_weight, mode); the first is the default


def measure(pipeline: str, corpus: str, weight: float, text_weight: float, mode: str) -> dict:
    nlp = spacy.load(ROOT / pipeline, config={f"{RULE}.weight": weight, f"{RULE}.text_weight": text_weight, f"{RULE}.mode": mode})
    _, linker = find_linker(nlp)
    rows, _ = mention_table(linker, read_docbin(nlp, ROOT / corpus), deep=0)
    right = np.array([r[1][0] in r[0] for r in rows if any(g in linker.index.row for g in r[0])])
    half = len(right) // 2
    return {"weight": weight, "text_weight": text_weight, "mode": mode, "in_kb": int(len(right)), "r1": round(float(right.mean()), 4),
            "halves": [round(float(right[:half].mean()), 4), round(float(right[half:].mean()), 4)]}


def markdown(r: dict) -> str:
    lines = [f"# The name-rows rule's settings on {r['corpus']}", "", machine_line(r["machine"]) + ".", "",
             f"Reproduce: `{r['command']}`. Pipeline `{r['pipeline']}` with the rule's settings overridden at load; gold "
             f"mentions, in-KB R@1 ({r['rows'][0]['in_kb']} mentions); the first row is the pipeline's own setting.", "",
             "| weight | text_weight | mode | R@1 | first half | second half |", "|---:|---:|---|---:|---:|---:|"]
    for row in r["rows"]:
        lines.append(f"| {row['weight']} | {row['text_weight']} | {row['mode']} | **{row['r1']:.4f}** | {row['halves'][0]:.4f} | {row['halves'][1]:.4f} |")
    if r.get("notes"):
        lines += ["", r["notes"]]
    return "\n".join(lines) + "\n"


def main(pipeline: str = typer.Option(...), corpus: str = typer.Option(...), output: str = typer.Option(..., help="report name in benchmarks/"),
         notes: str = typer.Option("")):
    rows: List[dict] = [measure(pipeline, corpus, *setting) for setting in GRID]
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "pipeline": pipeline,
              "corpus": corpus, "rows": rows, "notes": notes}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
