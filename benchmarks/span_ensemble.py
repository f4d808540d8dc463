"""Several span models in one span finder (``model = [A, B]``: their probabilities averaged), against each alone
(the ``--model`` folders each alone, then the first two together, the first three, …).

For each set of span models the end-to-end pipeline (its retriever, rules and config unchanged; the
span finder's ``model`` set by a config override at load) links the corpus's raw text once with no NIL
threshold, and the strict end-to-end F1 is measured three ways: no threshold; the threshold
``calibrate --e2e`` would pick on the whole corpus (what ``spacy project run e2e`` assembles); and
cross-fitted (each half of the documents thresholded by the other half's choice). Span F1 and the
time of the linking pass are shown beside them.

    python benchmarks/span_ensemble.py --pipeline training/ncbi_medic_both/pipeline_e2e \\
        --corpus corpus/ncbi_dev.spacy --model training/ncbi_medic_both/e2e/best \\
        --model training/ncbi_medic_both/e2e_seed1/best --output span_ensemble_ncbi
"""
from __future__ import annotations

import json
import time
from typing import List

import spacy
import typer

from _common import HERE, ROOT, invocation, lscpu_model, machine, machine_line
from e2e_calibration import crossfit, thresholded
from spacy_pel.corpora import read_docbin
from spacy_pel.evaluation.linking import e2e_metrics
from spacy_pel.evaluation.nil import e2e_curve
from spacy_pel.pipeline.linker import configure_linker, find_linker


def measure(pipeline: str, models: List[str], gold, folds: int) -> dict:
    """Strict F1 of the pipeline with span finder ``model = models`` (module doc)."""
    nlp = spacy.load(ROOT / pipeline, config={"components.pel_linker.mentions.model": models if len(models) > 1 else models[0]})
    name, linker = find_linker(nlp)
    configure_linker(nlp, name, threshold=None)
    list(nlp.pipe(nlp.make_doc(d.text) for d in gold[:4]))  # warm-up: loads every model
    t0 = time.perf_counter()
    predicted = list(nlp.pipe(nlp.make_doc(d.text) for d in gold))
    seconds = time.perf_counter() - t0
    canonical = linker.index.canonical
    none = e2e_metrics(predicted, gold, canonical)
    chosen = e2e_curve(predicted, gold, canonical)["threshold"]
    return {"models": models, "gamma": linker.mentions.threshold, "seconds": round(seconds, 1),
            "docs_per_s": round(len(gold) / seconds, 1), "span": none["span"], "none": none["strict"],
            "all_docs_threshold": chosen, "all_docs": e2e_metrics(thresholded(predicted, chosen), gold, canonical)["strict"],
            "crossfit": crossfit(predicted, gold, canonical, folds)}


def markdown(r: dict) -> str:
    lines = [f"# Span models averaged in one span finder: {r['corpus']}", "", machine_line(r["machine"]) + ".", "",
             f"Reproduce: `{r['command']}`. Pipeline `{r['pipeline']}` (retriever, rules and config unchanged; "
             f"the span finder's `model` overridden at load); {r['docs']} documents of raw text, tokenized by the pipeline.", "",
             "| span models | γ | span F1 | strict F1, no NIL threshold | strict F1, threshold chosen on all docs (as `e2e` assembles) | "
             f"strict F1, cross-fitted ({r['folds']} folds) | docs/s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in r["rows"]:
        names = " + ".join(f"`{m}`" for m in row["models"])
        lines.append(f"| {names} | {row['gamma']:.3g} | {row['span']['f']:.4f} | {row['none']['f']:.4f} | "
                     f"**{row['all_docs']['f']:.4f}** (t {row['all_docs_threshold']:.3f}) | **{row['crossfit']['f']:.4f}** | {row['docs_per_s']} |")
    if r.get("notes"):
        lines += ["", r["notes"]]
    return "\n".join(lines) + "\n"


def main(pipeline: str = typer.Option(...), corpus: str = typer.Option(...),
         model: List[str] = typer.Option(..., help="a span model folder (train_e2e's best/); repeat: each alone, then the first 2, 3, … together"),
         folds: int = typer.Option(2, help="cross-fitting folds for the NIL threshold"),
         output: str = typer.Option(..., help="report name in benchmarks/"), notes: str = typer.Option("")):
    gold = read_docbin(spacy.blank("en"), ROOT / corpus)
    sets = [[m] for m in model] + [list(model[:n]) for n in range(2, len(model) + 1)]  # each alone, then the first 2, 3, …
    rows = [measure(pipeline, s, gold, folds) for s in sets]
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "pipeline": pipeline,
              "corpus": corpus, "docs": len(gold), "folds": folds, "rows": rows, "notes": notes}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
