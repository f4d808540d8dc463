"""Plain metrics over arrays and counts: precision / recall / F1 and average precision."""
from __future__ import annotations

from typing import Dict

import numpy as np


def average_precision(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the precision-recall curve (step-wise), ``labels`` 1 = positive."""
    if labels.sum() == 0:
        return float("nan")
    order = np.argsort(-scores, kind="stable")
    hits = labels[order]
    precision = np.cumsum(hits) / np.arange(1, len(hits) + 1)
    return float((precision * hits).sum() / hits.sum())


def prf(tp: int, n_pred: int, n_gold: int) -> Dict[str, float]:
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    return {"p": round(p, 4), "r": round(r, 4), "f": round(2 * p * r / (p + r), 4) if p + r else 0.0}
