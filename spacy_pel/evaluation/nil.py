"""``python -m spacy_pel.calibrate``: choose the NIL threshold that maximises NIL F1 on a corpus with
NIL mentions, write it into a pipeline, and save the NIL precision-recall curve (PNG + JSON)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import spacy

from ..corpora import NIL, read_docbin
from ..pipeline.linker import configure_linker, find_linker
from .linking import mention_table
from .metrics import average_precision


def nil_curve(top_scores: np.ndarray, is_nil: np.ndarray) -> dict:
    """Precision/recall/F1 of "NIL if top score < t" for every useful threshold t."""
    if not is_nil.any():
        raise ValueError("the corpus has no gold NIL mentions: NIL calibration needs some")
    order = np.argsort(top_scores, kind="stable")
    scores, labels = top_scores[order], is_nil[order].astype(float)
    tp = np.cumsum(labels)
    n_pred = np.arange(1, len(labels) + 1)
    precision, recall = tp / n_pred, tp / labels.sum()
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    # "score < t" with t just above scores[i] predicts NIL for the first i+1 mentions
    nxt = np.append(scores[1:], scores[-1] + 1e-3)
    thresholds = (scores + nxt) / 2
    last = np.append(scores[1:] != scores[:-1], True)  # only cut between distinct scores
    best = int(np.argmax(np.where(last, f1, -1)))
    return {
        "threshold": float(thresholds[best]),
        "p": float(precision[best]),
        "r": float(recall[best]),
        "f": float(f1[best]),
        "average_precision": average_precision(is_nil.astype(int), -top_scores),
        "points": [
            {"threshold": float(t), "precision": float(p), "recall": float(r), "f1": float(f)}
            for t, p, r, f, keep in zip(thresholds, precision, recall, f1, last)
            if keep
        ],
    }


def plot_curve(curve: dict, path: Path, title: str = "NIL detection") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recall = [p["recall"] for p in curve["points"]]
    precision = [p["precision"] for p in curve["points"]]
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot(recall, precision, drawstyle="steps-post")
    ax.scatter([curve["r"]], [curve["p"]], color="red", zorder=3, label=f"threshold {curve['threshold']:.3f} (F1 {curve['f']:.3f})")
    ax.set(xlabel="NIL recall", ylabel="NIL precision", xlim=(0, 1.02), ylim=(0, 1.02), title=f"{title} (AP {curve['average_precision']:.3f})")
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def calibrate(pipeline: Path, corpus: Path, output: Path, plot: Optional[Path] = None, docs: Sequence[int] = ()) -> dict:
    """Calibrate ``pipeline`` on ``corpus`` (optionally only docs[0]:docs[1]) and save it to ``output``."""
    nlp = spacy.load(pipeline)
    name, linker = find_linker(nlp)
    gold_docs = read_docbin(nlp, corpus)
    if docs:
        gold_docs = gold_docs[docs[0] : docs[1]]
    rows, _ = mention_table(linker, gold_docs, k=1, progress=True)
    top = np.array([s[0] if len(s) else -np.inf for _, _, s in rows])
    is_nil = np.array([g == [NIL] for g, _, _ in rows])
    curve = nil_curve(top, is_nil)
    # settings live in the config: this writes the threshold into config.cfg, which spacy.load reads
    configure_linker(nlp, name, threshold=curve["threshold"])
    nlp.to_disk(output)
    summary = {k: v for k, v in curve.items() if k != "points"} | {"mentions": len(rows), "nil_mentions": int(is_nil.sum())}
    (output / "nil_calibration.json").write_text(json.dumps({**summary, "points": curve["points"]}, indent=2), encoding="utf8")
    if plot:
        plot.parent.mkdir(parents=True, exist_ok=True)
        plot_curve(curve, plot)
    return summary
