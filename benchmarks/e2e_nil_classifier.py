"""The end-to-end pipeline's NIL decision: a threshold on the best score (``calibrate --e2e``) against a
logistic model of "this found span is a strict hit" over the NIL evidence, the span model's probability
among it (``calibrate --e2e --nil classifier``), and the same model without the span probability.

For each set of span models (``--model``: each alone, then the first two together, …; none: the
pipeline's own) the pipeline links the corpus's raw text once with no threshold
(:func:`spacy_pel.evaluation.nil.e2e_evidence`), and each decision is measured three ways: chosen on all
documents (what ``spacy project run e2e`` assembles: fitted and scored on the same dev set), cross-fitted
over the two halves of the corpus in order (as ``span_ensemble.py`` does), and cross-fitted over
``--splits`` random halves of the documents (mean ± sd): a decision fitted on one half scores the other.

    python benchmarks/e2e_nil_classifier.py --pipeline training/ncbi_medic_both/pipeline_e2e \\
        --corpus corpus/ncbi_dev.spacy --output e2e_nil_classifier_ncbi
"""
from __future__ import annotations

import json
import time
from typing import Callable, List, Optional

import numpy as np
import spacy
import typer

from _common import HERE, ROOT, invocation, lscpu_model, machine, machine_line
from spacy_pel.corpora import read_docbin
from spacy_pel.evaluation.nil import FoundEvidence, e2e_evidence, fit_e2e_classifier, label_types, strict_curve
from spacy_pel.pipeline.linker import configure_linker, find_linker
from spacy_pel.pipeline.nil import FEATURES, ClassifierNil

Decision = Callable[[FoundEvidence, np.ndarray], Callable[[np.ndarray], np.ndarray]]  # fit on a span mask → confidence


def top_score(evidence: FoundEvidence, fit: np.ndarray):
    return lambda x: x[:, 0].astype(float)


def classifier(types, without: Optional[str] = None) -> Decision:
    """The e2e classifier fitted on the spans ``fit``; ``without``: that feature held at 0 in the fit, so
    it is left out (a constant feature gets weight 0) and the fitted model ignores it."""
    def fitted(evidence: FoundEvidence, fit: np.ndarray):
        x = evidence.features[fit].copy()
        if without:
            x[:, FEATURES.index(without)] = 0.0
        model = fit_e2e_classifier(FoundEvidence(x, evidence.correct[fit], evidence.docs[fit], evidence.gold), types)
        return lambda features: model(features).astype(float)
    return fitted


def scored(evidence: FoundEvidence, decision: Decision, fit_docs: np.ndarray) -> tuple:
    """(strict hits kept, spans kept) on the documents outside ``fit_docs``, thresholded as chosen on them."""
    fit = np.isin(evidence.docs, fit_docs)
    confidence = decision(evidence, fit)
    chosen = strict_curve(confidence(evidence.features[fit]), evidence.correct[fit], int(evidence.gold[fit_docs].sum()))["threshold"]
    rest = ~fit
    keep = np.ones(int(rest.sum()), bool) if chosen is None else confidence(evidence.features[rest]) >= chosen
    return int((keep & evidence.correct[rest]).sum()), int(keep.sum())


def crossfit(evidence: FoundEvidence, decision: Decision, halves: List[np.ndarray]) -> float:
    """Strict F1 of all documents, each half decided as the other half chose."""
    n = len(evidence.gold)
    hits = kept = 0
    for half in halves:
        other = np.setdiff1d(np.arange(n), half)
        h, k = scored(evidence, decision, other)  # fitted on the other half, scored on this one
        hits, kept = hits + h, kept + k
    return 2 * hits / (kept + int(evidence.gold.sum()))


def measure(pipeline: str, models: List[str], gold, splits: int) -> dict:
    config = {"components.pel_linker.mentions.model": models if len(models) > 1 else models[0]} if models else {}
    nlp = spacy.load(ROOT / pipeline, config=config)
    name, linker = find_linker(nlp)
    configure_linker(nlp, name, threshold=None)
    types = label_types(gold, linker.index)
    linker.nil = ClassifierNil({}, 0.0, types)  # every feature computed
    t0 = time.perf_counter()
    evidence = e2e_evidence(nlp, name, linker, gold)
    seconds = time.perf_counter() - t0
    n = len(gold)
    in_order = [np.arange(0, n // 2), np.arange(n // 2, n)]
    rng = np.random.default_rng(0)
    random_halves = []
    for _ in range(splits):
        order = rng.permutation(n)
        random_halves.append([np.sort(order[: n // 2]), np.sort(order[n // 2:])])
    decisions = {"top score (threshold)": top_score, "classifier, all evidence": classifier(types),
                 "classifier without the span probability": classifier(types, without="span")}
    rows = []
    for label, decision in decisions.items():
        fit = np.ones(len(evidence.correct), bool)
        confidence = decision(evidence, fit)
        all_docs = strict_curve(confidence(evidence.features), evidence.correct, int(evidence.gold.sum()))
        random_f = [crossfit(evidence, decision, h) for h in random_halves]
        rows.append({"decision": label, "all_docs": {k: all_docs[k] for k in ("p", "r", "f", "kept", "threshold")},
                     "crossfit_in_order": crossfit(evidence, decision, in_order),
                     "crossfit_random": {"mean": float(np.mean(random_f)), "sd": float(np.std(random_f)), "splits": splits}})
    none = 2 * int(evidence.correct.sum()) / (len(evidence.correct) + int(evidence.gold.sum()))
    return {"models": models, "seconds": round(seconds, 1), "found": len(evidence.correct),
            "hits": int(evidence.correct.sum()), "gold": int(evidence.gold.sum()), "no_threshold": none, "rows": rows}


def markdown(r: dict) -> str:
    lines = [f"# The e2e NIL decision: a threshold on the best score vs a classifier with the span probability ({r['corpus']})", "",
             machine_line(r["machine"]) + ".", "", f"Reproduce: `{r['command']}`. Pipeline `{r['pipeline']}`; {r['docs']} documents "
             "of raw text linked once with no threshold; every decision fitted and thresholded on strict F1 (module doc of "
             "`benchmarks/e2e_nil_classifier.py`).", ""]
    for s in r["sets"]:
        models = " + ".join(f"`{m}`" for m in s["models"]) or "the pipeline's own"
        lines += [f"## Span models: {models}", "",
                  f"{s['found']} found spans linked to an entity, {s['hits']} strict hits, {s['gold']} gold mentions; "
                  f"strict F1 with no threshold {s['no_threshold']:.4f}; linking pass {s['seconds']} s.", "",
                  "| decision | strict F1, chosen on all docs (as `e2e` assembles) | P / R | cross-fitted, halves in order | "
                  f"cross-fitted, {s['rows'][0]['crossfit_random']['splits']} random halvings (mean ± sd) |",
                  "|---|---:|---|---:|---:|"]
        for row in s["rows"]:
            a, c = row["all_docs"], row["crossfit_random"]
            lines.append(f"| {row['decision']} | **{a['f']:.4f}** | {a['p']:.3f} / {a['r']:.3f} | {row['crossfit_in_order']:.4f} | "
                         f"**{c['mean']:.4f}** ± {c['sd']:.4f} |")
        lines.append("")
    if r.get("notes"):
        lines += [r["notes"], ""]
    return "\n".join(lines)


def main(pipeline: str = typer.Option(..., help="an end-to-end pipeline (pipeline_e2e or its calibrated copy)"),
         corpus: str = typer.Option(..., help="gold .spacy corpus (dev)"),
         model: List[str] = typer.Option([], help="span model folders (train_e2e's best/): each alone, then the first 2, 3, … together; none: the pipeline's own"),
         splits: int = typer.Option(20, help="random halvings for the cross-fitted figure"),
         output: str = typer.Option(..., help="report name in benchmarks/"), notes: str = typer.Option("")):
    gold = read_docbin(spacy.blank("en"), ROOT / corpus)
    sets = [[m] for m in model] + [list(model[:n]) for n in range(2, len(model) + 1)] if model else [[]]
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "pipeline": pipeline,
              "corpus": corpus, "docs": len(gold), "sets": [measure(pipeline, s, gold, splits) for s in sets], "notes": notes}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
