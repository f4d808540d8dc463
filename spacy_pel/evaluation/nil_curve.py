"""The NIL precision-recall curve of a linker's confidences on gold mentions, and the threshold
``calibrate`` chooses on it (:func:`nil_curve`), with its plot (:func:`plot_curve`).

A mention is NIL when its confidence is below the threshold. The candidate thresholds are the cuts
between distinct confidences that the linker can hold (up to ``upper``: the top score's range with the
``char_ngrams`` rule's bonus, 1 for a probability). When a bound on the in-KB recall@1 loss allows none
of them, "nothing NIL" (threshold ``None``: never NIL, no loss) is the answer, and the curve says so."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ..files import InputError
from .metrics import average_precision, rates, shown


def nil_curve(top_scores: np.ndarray, is_nil: np.ndarray, correct: Optional[np.ndarray] = None,
              max_r1_loss: Optional[float] = None, in_kb: Optional[np.ndarray] = None, upper: float = 1.0) -> dict:
    """Precision/recall/F1 of "NIL if confidence < t" for every useful threshold t up to ``upper`` (the
    highest threshold the linker takes); the best one by NIL F1 — among those that turn at most
    ``max_r1_loss`` of the in-KB mentions from ``correct`` (linked right) to NIL, when both are given
    (``correct``: per mention, its best candidate is gold). ``in_kb`` marks the in-KB mentions, the share's
    denominator (default: every mention not NIL; give it when some gold ids are absent from the KB: those
    are no in-KB mentions). When no cut is allowed, threshold ``None`` (nothing NIL, loss 0; recall 0, precision
    and F1 None: n/a, as ``evaluate`` reports a pipeline that calls nothing NIL) with a ``note``, unless
    ``max_r1_loss`` is below 0."""
    if not is_nil.any():
        raise InputError("the corpus has no gold NIL mentions: NIL calibration needs some")
    order = np.argsort(top_scores, kind="stable")
    scores, labels = top_scores[order], is_nil[order].astype(float)
    tp = np.cumsum(labels)
    n_pred = np.arange(1, len(labels) + 1)
    precision, recall = tp / n_pred, tp / labels.sum()
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    # "score < t" with t just above scores[i] predicts NIL for the first i+1 mentions
    nxt = np.append(scores[1:], scores[-1] + 1e-3)
    thresholds = (scores + nxt) / 2
    allowed = np.append(scores[1:] != scores[:-1], True)  # only cut between distinct scores
    # a cut above the highest confidence the linker can give ("every mention NIL" when the highest is that
    # bound, as a decided mention's 1.0 is without the char_ngrams bonus) is no threshold a linker can hold
    allowed &= thresholds <= upper
    loss = np.zeros(len(scores))
    if correct is not None:
        in_kb = ~is_nil if in_kb is None else np.asarray(in_kb, dtype=bool)
        loss = np.cumsum((correct & in_kb)[order].astype(float)) / max(int(in_kb.sum()), 1)
        if max_r1_loss is not None:
            allowed &= loss <= max_r1_loss
    points = [{"threshold": float(t), "precision": float(p), "recall": float(r), "f1": float(f)}
              for t, p, r, f, keep in zip(thresholds, precision, recall, f1, allowed) if keep]
    ap = average_precision(is_nil.astype(int), -top_scores)
    if not allowed.any():
        if max_r1_loss is not None and not max_r1_loss >= 0.0:
            raise InputError(f"no threshold keeps the in-KB recall@1 loss within {max_r1_loss}")
        within = f" keeps the in-KB recall@1 loss within {max_r1_loss}" if max_r1_loss is not None else " is allowed"
        return {"threshold": None, **rates(0, 0, int(is_nil.sum())), "in_kb_r1_loss": 0.0, "average_precision": ap,
                "note": f"no threshold that turns a mention NIL{within}: nothing is NIL (threshold null)", "points": points}
    best = int(np.argmax(np.where(allowed, f1, -1)))
    return {"threshold": float(thresholds[best]), "p": float(precision[best]), "r": float(recall[best]),
            "f": float(f1[best]), "in_kb_r1_loss": float(loss[best]), "average_precision": ap, "points": points}


def plot_curve(curve: Optional[dict], path: Path, title: str = "NIL detection") -> None:
    """The NIL precision-recall curve of :func:`nil_curve` as a PNG; ``None``: a corpus without NIL
    mentions, an empty plot that says so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 4))
    if curve is None:
        ax.text(0.5, 0.5, "no gold NIL mentions:\nnothing to calibrate", ha="center", va="center")
    else:
        recall = [p["recall"] for p in curve["points"]]
        precision = [p["precision"] for p in curve["points"]]
        ax.plot(recall, precision, drawstyle="steps-post")
        chosen = "no threshold" if curve["threshold"] is None else f"threshold {curve['threshold']:.3f}"
        if curve["p"] is None:  # nothing called NIL: no point on the curve to mark
            ax.plot([], [], " ", label=f"{chosen}: nothing is NIL (F1 n/a)")
        else:
            ax.scatter([curve["r"]], [curve["p"]], color="red", zorder=3, label=f"{chosen} (F1 {shown(curve['f'])})")
        ax.legend(loc="lower left")
        title = f"{title} (AP {curve['average_precision']:.3f})"
    ax.set(xlabel="NIL recall", ylabel="NIL precision", xlim=(0, 1.02), ylim=(0, 1.02), title=title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
