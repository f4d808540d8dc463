"""A training-frequency entity prior: does re-ranking the pipeline's candidates by how often the training
corpus links each entity help?

``python benchmarks/entity_prior.py --case LABEL,PIPELINE,DEV,TRAIN … --output NAME`` links DEV's gold
mentions once with the pipeline as saved (its own ``top_k`` candidates and scores, rules included) and
re-ranks each mention's candidates by ``score + λ · log(1 + n)``, n = the candidate's gold mentions in
TRAIN (alternative ids counted as their entity), for each λ of ``--lam``. In-KB R@1 and unseen-entity
R@1 (gold absent from TRAIN) per λ. Where a rule ordered a mention's candidates other than by score (the
pipeline's first candidate is not its best-scored one), the pipeline's choice is kept: λ = 0 is the pipeline. "Cross-fitted":
λ chosen on the first half of the documents and measured on the second, and the other way round
(the mean of the two halves' R@1).
"""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import List, Sequence, Tuple

import typer

from _common import invocation, machine, machine_line
from accuracy import load
from spacy_pel.corpora import corpus_ids, gold_ids, gold_spans, read_docbin
from spacy_pel.evaluation.linking import canonical_ids, mention_table, metrics
from spacy_pel.pipeline.mentions import linked_gold

LAMBDAS = (0.0, 0.005, 0.01, 0.02, 0.05, 0.1)


def pick(ids: Sequence, scores: Sequence[float], counts: Sequence[int], lam: float):
    """The candidate with the best ``score + lam·log(1 + count)`` (the first of equals, in the pipeline's order)."""
    best, best_value = None, -math.inf
    for i, s, n in zip(ids, scores, counts):
        value = s + lam * math.log1p(n)
        if i is not None and value > best_value:
            best, best_value = i, value
    return best


def ranked(ids: Sequence, scores: Sequence[float], counts: Sequence[int], lam: float):
    """The prior's pick where the pipeline ranked by score; its own first candidate where a rule ordered the
    candidates otherwise (so λ = 0 is the pipeline)."""
    if not ids or pick(ids, scores, counts, 0.0) != ids[0]:
        return ids[0] if ids else None
    return pick(ids, scores, counts, lam)


def recall_at_1(rows, kb_ids, train_ids) -> Tuple[float, float]:
    """In-KB and unseen-entity R@1 of :func:`mention_table` rows, as the project's :func:`metrics` counts them."""
    m = metrics(rows, 0.0, kb_ids, train_ids)
    return m["recall_in_kb"].get("R@1", 0.0), m["recall_unseen"].get("R@1", 0.0)


def case(label: str, pipeline: Path, dev: Path, train: Path, lambdas: Sequence[float]) -> dict:
    nlp, linker = load(pipeline)
    linker.ensure_loaded()
    canonical, kb_ids = linker.index.canonical, linker.index.row
    train_docs = read_docbin(nlp, train)
    train_ids = canonical_ids(linker, corpus_ids(train_docs))
    counts = Counter(canonical(i) for d in train_docs for s in gold_spans(d) for i in gold_ids(s.kb_id_))
    docs = read_docbin(nlp, dev)
    rows, _ = mention_table(linker, docs, k=None, deep=linker.top_k)
    doc_of = [n for n, d in enumerate(docs) for _ in linked_gold(linker.mentions, d)]  # mention_table's rows, in order
    halves = [[r for r, d in zip(rows, doc_of) if (d < len(docs) // 2) == first] for first in (True, False)]
    m = metrics(rows, 0.0, kb_ids, train_ids)
    out = {"case": label, "pipeline": str(pipeline), "dev": str(dev), "train": str(train),
           "in_kb": m["counts"]["in_kb"], "unseen": m["counts"]["unseen"],
           "rows": [{"ranking": "pipeline", "R@1": m["recall_in_kb"]["R@1"], "unseen R@1": m["recall_unseen"]["R@1"]}]}

    def reranked(part, lam):  # each row with the prior's pick as its only candidate
        return [(r[0], [ranked(r[1], r[2], [counts.get(i, 0) for i in r[1]], lam)], *r[2:]) for r in part]

    for lam in lambdas:
        r1, unseen_r1 = recall_at_1(reranked(rows, lam), kb_ids, train_ids)
        out["rows"].append({"ranking": f"λ {lam}", "R@1": r1, "unseen R@1": unseen_r1})
    crossed = []
    for fit, test in (halves, halves[::-1]):
        lam = max(lambdas, key=lambda v: (recall_at_1(reranked(fit, v), kb_ids, train_ids)[0], -v))
        crossed.append({"lambda": lam, "R@1": recall_at_1(reranked(test, lam), kb_ids, train_ids)[0]})
    out["cross_fitted"] = crossed
    return out


def markdown(report: dict) -> str:
    lines = ["# A training-frequency entity prior over the pipeline's candidates", "",
             f"{machine_line(report['machine'])}.", "", f"Reproduce: `{report['command']}`. Module doc of "
             "`benchmarks/entity_prior.py`: gold mentions, the pipeline's own candidates re-ranked by "
             "score + λ·log(1 + training mentions of the candidate).", ""]
    for c in report["cases"]:
        lines += [f"## {c['case']}", "", f"{c['in_kb']} in-KB gold mentions ({c['unseen']} of entities unseen in training).", "",
                  "| ranking | R@1 | unseen R@1 |", "|---|---:|---:|"]
        lines += [f"| {r['ranking']} | {r['R@1']:.4f} | {r['unseen R@1']:.4f} |" for r in c["rows"]]
        x = c["cross_fitted"]
        lines += ["", "Cross-fitted (λ chosen on one half of the documents, measured on the other): "
                  + "; ".join(f"λ {h['lambda']} → R@1 {h['R@1']:.4f}" for h in x)
                  + f" (mean {sum(h['R@1'] for h in x) / len(x):.4f}).", ""]
    if report.get("notes"):
        lines += [report["notes"]]
    return "\n".join(lines) + "\n"


def main(case_: List[str] = typer.Option(..., "--case", help="LABEL,PIPELINE,DEV,TRAIN (comma-separated; the last three are paths)"),
         lam: List[float] = typer.Option(list(LAMBDAS), "--lam", help="prior weights to try"),
         output: Path = typer.Option(..., help="report path without suffix (benchmarks/NAME)"),
         notes: str = typer.Option("", help="a paragraph added to the report")):
    """Re-rank a pipeline's candidates with a training-frequency prior; write OUTPUT.md / OUTPUT.json."""
    cases = []
    for spec in case_:
        parts = spec.rsplit(",", 3)  # the label may hold commas
        if len(parts) != 4:
            raise typer.BadParameter(f"--case {spec!r}: expected LABEL,PIPELINE,DEV,TRAIN")
        cases.append(case(parts[0], Path(parts[1]), Path(parts[2]), Path(parts[3]), sorted(set(lam))))
    report = {"machine": machine(), "command": invocation(), "cases": cases, "notes": notes}
    output.with_suffix(".json").write_text(json.dumps(report, indent=1), encoding="utf8")
    output.with_suffix(".md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
