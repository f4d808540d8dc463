"""The end-to-end NIL threshold (``calibrate --e2e``), measured on documents that did not choose it.

``python -m spacy_pel calibrate PIPELINE CORPUS --e2e -o OUT`` picks the threshold on the pipeline's NIL
confidence with the best strict end-to-end F1 on the corpus's raw text: a found span below it becomes NIL,
so spurious spans (a found span that no KB entry fits well) are dropped as well as NIL mentions. Here the
pipeline links the raw text once with no threshold; the threshold is chosen on the tuning documents
(:func:`spacy_pel.evaluation.nil.e2e_curve`) and applied to the test documents, beside the pipeline's
own threshold (from its ``nil_calibration.json``: ``calibrate --e2e`` since session 20, gold mentions
before) and none at all.

    python benchmarks/e2e_calibration.py --pipeline training/context32/pipeline_e2e_calibrated \
        --corpus corpus/bc5cdr_dev.spacy --tune 0:100 --test 100:500 --output e2e_calibration_bc5cdr
    python benchmarks/e2e_calibration.py --pipeline training/ncbi_medic_both/pipeline_e2e_calibrated \
        --corpus corpus/ncbi_dev.spacy --folds 2 --output e2e_calibration_ncbi

``--folds k``: the corpus cut into k runs of documents; each is tested with the threshold chosen on the
others (every document tested once, by a threshold it did not choose), then pooled. ``--gamma g`` (repeatable,
with ``--folds``): the span finder's threshold γ swept too, each γ linked anew and cross-fitted the same way.
"""
from __future__ import annotations

import json
import time
from typing import List, Optional

import spacy
import typer
from spacy.tokens import Doc, Span

from _common import HERE, ROOT, invocation, lscpu_model, machine, machine_line
from spacy_pel.corpora import NIL, read_docbin
from spacy_pel.evaluation.linking import e2e_metrics
from spacy_pel.evaluation.nil import e2e_curve
from spacy_pel.pipeline.linker import CONFIDENCE_ATTR, configure_linker, find_linker


def thresholded(docs: List[Doc], threshold: Optional[float]) -> List[Doc]:
    """Copies of linked docs where a found span whose confidence is below ``threshold`` is NIL."""
    out = []
    for doc in docs:
        copy = doc.copy()
        ents = []
        for span, orig in zip(copy.ents, doc.ents):
            c = orig._.get(CONFIDENCE_ATTR)
            nil = threshold is not None and c is not None and c < threshold
            ents.append(Span(copy, span.start, span.end, label=span.label_, kb_id=NIL if nil else span.kb_id_))
        copy.ents = ents
        out.append(copy)
    return out


def scores(predicted, gold, canonical, threshold) -> dict:
    m = e2e_metrics(thresholded(predicted, threshold), gold, canonical)
    return {"threshold": threshold, "strict": m["strict"], "predicted": m["predicted"], "gold": m["gold"]}


def fold_ranges(n: int, folds: int) -> List[tuple]:
    """k runs of documents (a, b) covering 0..n in order."""
    cuts = [round(i * n / folds) for i in range(folds + 1)]
    return list(zip(cuts, cuts[1:]))


def others_threshold(predicted, gold, canonical, a: int, b: int) -> Optional[float]:
    """The threshold the documents outside a:b choose."""
    return e2e_curve(predicted[:a] + predicted[b:], gold[:a] + gold[b:], canonical)["threshold"]


def pooled(predicted, gold, canonical, ranges: List[tuple], thresholds: List[Optional[float]]) -> dict:
    """Every document scored together, each run of documents thresholded by its own threshold."""
    docs = [d for (a, b), t in zip(ranges, thresholds) for d in thresholded(predicted[a:b], t)]
    m = e2e_metrics(docs, gold, canonical)
    return {"strict": m["strict"], "predicted": m["predicted"]}


def shipped_source(pipeline: str) -> str:
    """Where the pipeline's own threshold came from (its ``nil_calibration.json``)."""
    path = ROOT / pipeline / "nil_calibration.json"
    info = json.loads(path.read_text()) if path.exists() else {}
    if info.get("objective") == "strict end-to-end F1":
        return f"calibrate --e2e on all {info.get('docs')} docs (these included)"
    return "gold mentions (calibrate_e2e before session 20)"


def crossfit(predicted, gold, canonical, folds: int) -> dict:
    """Strict P/R/F1 of all documents, each run thresholded by the threshold the other runs chose."""
    ranges = fold_ranges(len(gold), folds)
    return pooled(predicted, gold, canonical, ranges, [others_threshold(predicted, gold, canonical, a, b) for a, b in ranges])["strict"]


def gamma_rows(pipeline: str, gold, gammas: List[float], folds: int) -> List[dict]:
    """The span finder's threshold γ swept with the NIL threshold: each γ linked anew (no NIL threshold)."""
    rows = []
    for gamma in gammas:
        nlp = spacy.load(ROOT / pipeline, config={"components.pel_linker.mentions.threshold": gamma,
                                                  "components.pel_linker.threshold": None})
        canonical = find_linker(nlp)[1].index.canonical
        predicted = list(nlp.pipe(nlp.make_doc(d.text) for d in gold))
        rows.append({"gamma": gamma, "none": scores(predicted, gold, canonical, None)["strict"],
                     "crossfit": crossfit(predicted, gold, canonical, folds)})
    return rows


def span_range(text: str) -> slice:
    a, b = text.split(":")
    return slice(int(a), int(b))


def markdown(r: dict) -> str:
    lines = [f"# End-to-end NIL threshold chosen on strict F1 (`calibrate --e2e`): {r['corpus']}", "",
             machine_line(r["machine"]) + ".", "", f"Reproduce: `{r['command']}`. Pipeline `{r['pipeline']}` "
             f"(its own threshold {r['shipped_threshold']}); the raw text linked once with no threshold "
             f"({r['seconds']} s for {r['docs']} documents), thresholds applied to the found spans' NIL confidence.", "",
             "| test documents | threshold | chosen on | strict P | strict R | strict F1 | predicted |", "|---|---|---|---:|---:|---:|---:|"]
    for row in r["rows"]:
        s = row["strict"]
        t = row["threshold"] if isinstance(row["threshold"], str) else "none" if row["threshold"] is None else f"{row['threshold']:.3f}"
        lines.append(f"| {row['test']} | {t} | {row['chosen_on']} | {s['p']:.3f} | {s['r']:.3f} | **{s['f']:.3f}** | {row.get('predicted', '')} |")
    if r.get("gammas"):
        lines += ["", f"The span finder's threshold γ (the span model's own: {r['span_gamma']}) swept with the NIL threshold "
                  f"(each γ linked anew; the NIL threshold cross-fitted over {r['folds']} folds as above):", "",
                  "| γ | strict F1, no NIL threshold | strict P | strict R | strict F1, cross-fitted threshold |", "|---:|---:|---:|---:|---:|"]
        for g in r["gammas"]:
            c = g["crossfit"]
            lines.append(f"| {g['gamma']} | {g['none']['f']:.3f} | {c['p']:.3f} | {c['r']:.3f} | **{c['f']:.3f}** |")
    if r.get("notes"):
        lines += ["", r["notes"]]
    return "\n".join(lines) + "\n"


def main(pipeline: str = typer.Option(...), corpus: str = typer.Option(...),
         tune: Optional[str] = typer.Option(None, help="documents a:b that choose the threshold"),
         test: Optional[str] = typer.Option(None, help="documents c:d it is tested on"),
         folds: int = typer.Option(0, help="instead of --tune/--test: k runs of documents, each tested by the others' threshold"),
         gamma: List[float] = typer.Option([], help="with --folds: span-finder thresholds γ to sweep as well (repeatable)"),
         output: str = typer.Option(..., help="report name in benchmarks/"), notes: str = typer.Option("")):
    nlp = spacy.load(ROOT / pipeline)
    name, linker = find_linker(nlp)
    shipped, source = linker.threshold, shipped_source(pipeline)
    configure_linker(nlp, name, threshold=None)
    gold = read_docbin(spacy.blank("en"), ROOT / corpus)
    list(nlp.pipe(nlp.make_doc(d.text) for d in gold[:4]))  # warm-up
    t0 = time.perf_counter()
    predicted = list(nlp.pipe(nlp.make_doc(d.text) for d in gold))
    seconds = round(time.perf_counter() - t0, 1)
    canonical = linker.index.canonical
    rows = []
    if folds:
        n, ranges = len(gold), fold_ranges(len(gold), folds)
        chosen = [others_threshold(predicted, gold, canonical, a, b) for a, b in ranges]
        for (a, b), t in zip(ranges, chosen):
            for thr, on in ((None, "–"), (shipped, source), (t, f"the other {n - (b - a)} docs")):
                rows.append({"test": f"{a}:{b}", "chosen_on": on, **scores(predicted[a:b], gold[a:b], canonical, thr)})
        for thr, thresholds, on in ((None, [None] * folds, "–"), (shipped, [shipped] * folds, source),
                                    ("per fold", chosen, "the other folds (each its own)")):
            rows.append({"test": f"all {n} (pooled)", "chosen_on": on, "threshold": thr,
                         **pooled(predicted, gold, canonical, ranges, thresholds)})
    else:
        tn, ts = span_range(tune), span_range(test)
        t = e2e_curve(predicted[tn], gold[tn], canonical)["threshold"]
        oracle = e2e_curve(predicted[ts], gold[ts], canonical)
        for thr, on in ((None, "–"), (shipped, source), (t, f"docs {tune}"),
                        (oracle["threshold"], f"docs {test} themselves (the ceiling)")):
            rows.append({"test": test, "chosen_on": on, **scores(predicted[ts], gold[ts], canonical, thr)})
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "pipeline": pipeline,
              "corpus": corpus, "shipped_threshold": shipped, "folds": folds, "span_gamma": getattr(linker.mentions, "threshold", None),
              "gammas": gamma_rows(pipeline, gold, gamma, folds) if gamma and folds else [], "docs": len(gold), "seconds": seconds, "rows": rows, "notes": notes}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
