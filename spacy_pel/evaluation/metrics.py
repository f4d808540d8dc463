"""Plain metrics over arrays and counts: precision / recall / F1 and average precision."""
from __future__ import annotations

from typing import Dict

import numpy as np


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
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    return {"p": round(p, 4), "r": round(r, 4), "f": round(2 * p * r / (p + r), 4) if p + r else 0.0}
