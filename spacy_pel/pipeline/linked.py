"""What ``pel_linker`` computes for a doc's mentions before it writes them: :class:`Linked`, and how the
NIL evidence's candidate depth is kept apart from ``top_k``.

The NIL evidence (:func:`~spacy_pel.pipeline.nil.nil_features`) reads the runner-up's score (its
``margin``), so the linker searches at least :data:`EVIDENCE_K` candidates for it and keeps ``top_k``
of them: without candidate rules, a strategy fitted at one ``top_k`` decides the same at another (``top_k`` 1
included). Rules re-score the candidates they are given (``label_types`` re-sorts them by type), so with rules the
best and the runner-up can come from deeper in a longer list: fit and link at the same ``top_k``."""
from __future__ import annotations

from typing import List, NamedTuple, Sequence

import numpy as np

EVIDENCE_K = 2  # candidates the NIL evidence reads: the best and the runner-up


class Linked(NamedTuple):
    """One doc's mentions after the rules: top-k ``scores``/``rows`` (best first, row -1: none), the
    NIL strategy's ``confidence`` (NIL below the threshold) and its evidence ``features`` (:mod:`.nil`)."""

    scores: np.ndarray
    rows: np.ndarray
    confidence: np.ndarray
    features: np.ndarray


def search_depth(k: int) -> int:
    """Candidates to search for ``k`` kept ones: at least :data:`EVIDENCE_K`, for the NIL evidence."""
    return max(k, EVIDENCE_K)


def per_doc(spans: Sequence[list], k: int, scores: np.ndarray, rows: np.ndarray, confidence: np.ndarray,
            features: np.ndarray) -> List[Linked]:
    """The flat arrays of a batch's mentions (per doc ``spans``) as one :class:`Linked` per doc, each
    keeping its ``k`` best candidates."""
    out, start = [], 0
    for doc_spans in spans:
        part = slice(start, start + len(doc_spans))
        out.append(Linked(scores[part, :k], rows[part, :k], confidence[part], features[part]))
        start += len(doc_spans)
    return out
