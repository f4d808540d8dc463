"""Plain metrics over arrays and counts: precision / recall / F1, average precision, the one-to-one matching
counts come from, and how a report shows a figure (rounded for JSON, formatted for a table; n/a when undefined)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set

import numpy as np

PLACES = 4  # a figure's decimal places in a JSON report


def average_precision(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the precision-recall curve (step-wise), ``labels`` 1 = positive, as scikit-learn's
    ``average_precision_score``: ``sum (R_i - R_{i-1}) P_i`` over the distinct scores, highest first. Tied
    scores are one operating point (precision after the whole tie), so the order of the items does not
    matter."""
    labels, scores = np.asarray(labels), np.asarray(scores)
    if labels.sum() == 0:
        return float("nan")
    order = np.argsort(-scores, kind="stable")
    ranked, hits = scores[order], labels[order]
    last = np.r_[ranked[1:] != ranked[:-1], True]  # the last position of each tie group
    tp = np.cumsum(hits)[last]
    precision = tp / (np.flatnonzero(last) + 1)
    recall_gain = np.diff(np.r_[0, tp]) / hits.sum()
    return float((recall_gain * precision).sum())


def prf(tp: int, n_pred: int, n_gold: int) -> Dict[str, float]:
    """P / R / F1 to :data:`PLACES` places for choosing a model or a threshold (the training evaluators): an
    empty denominator counts as 0, a number ``max`` can compare. Reports use :func:`rates`."""
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    return {"p": round(p, PLACES), "r": round(r, PLACES), "f": round(2 * p * r / (p + r), PLACES) if p + r else 0.0}


def ratio(part: float, whole: float) -> Optional[float]:
    """``part / whole``, None (n/a) when ``whole`` is 0: a measure of nothing is undefined, not 0."""
    return part / whole if whole else None


def rates(tp: int, n_pred: int, n_gold: int) -> Dict[str, Optional[float]]:
    """Exact P / R / F1 for a report: precision None (n/a) when nothing is predicted, recall None when there is
    no gold, F1 (their harmonic mean) None unless both are defined."""
    p, r = ratio(tp, n_pred), ratio(tp, n_gold)
    f = None if p is None or r is None else (2 * p * r / (p + r) if p + r else 0.0)
    return {"p": p, "r": r, "f": f}


def rounded(figures: Any, places: int = PLACES) -> Any:
    """``figures`` (a float, None, or a dict of them, nested) with every float rounded to ``places``, as a JSON
    report holds them; a table formats the exact figures once (:func:`shown`)."""
    if isinstance(figures, dict):
        return {k: rounded(v, places) for k, v in figures.items()}
    return round(float(figures), places) if isinstance(figures, (float, np.floating)) else figures


class Report(dict):
    """A report as its JSON holds it (its figures rounded to :data:`PLACES`) that keeps the same report with the
    exact figures as ``exact``, for a table that formats each figure once: a figure rounded twice (0.82049 →
    0.8205 → 0.821) would be one unit off in its last digit."""

    def __init__(self, figures: dict, exact: dict):
        super().__init__(figures)
        self.exact = exact


def exact(report: dict) -> dict:
    """The exact figures of a :class:`Report`; any other report (read back from JSON) as it is."""
    return getattr(report, "exact", report)


def shown(figure: Optional[float], places: int = 3) -> str:
    """A figure as a table prints it: ``places`` decimals, ``n/a`` when undefined (None)."""
    return "n/a" if figure is None else f"{figure:.{places}f}"


def max_matching(edges: Sequence[Sequence[int]]) -> List[Optional[int]]:
    """A maximum one-to-one matching of a bipartite graph whose left node ``i`` may take the right nodes
    ``edges[i]`` (in the order given, preferred first): per left node, its right node or None. Augmenting paths
    (Kuhn's algorithm, iterative), so the count does not depend on the order of either side."""
    match: List[Optional[int]] = [None] * len(edges)
    owner: Dict[int, int] = {}
    for start in range(len(edges)):
        seen: Set[int] = set()
        stack: List[list] = [[start, iter(edges[start]), None]]
        while stack:
            frame = stack[-1]
            right = next((v for v in frame[1] if v not in seen), None)
            if right is None:
                stack.pop()
                continue
            seen.add(right)
            frame[2] = right
            if right in owner:  # taken: can its owner move on to another?
                stack.append([owner[right], iter(edges[owner[right]]), None])
                continue
            for left, _, taken in stack:  # a free right node: each left node on the path takes the one it reached
                match[left], owner[taken] = taken, left
            break
    return match
