"""A mention's evidence (``span._.pel_candidates``, ``span._.pel_confidence``) made to agree with the entity
clustering inference linked it to, as ``pel_discovery`` and :func:`~.cluster.discover` leave it."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..pipeline.linker import PELLinker
from ..pipeline.nil import TopScoreNil

Evidence = Tuple[Optional[list], Optional[float]]  # a span's pel_candidates and pel_confidence


def agreeing_evidence(linker: PELLinker, entity: Optional[str], vector: np.ndarray, candidates: Optional[list],
                      confidence: Optional[float]) -> Evidence:
    """A mention's candidates and confidence once clustering inference has linked it to ``entity``:
    unchanged when it is NIL or the entity is its first candidate; else the entity first (its own entry, or
    its similarity to the mention) and its score as the confidence when the linker's confidence is its best
    score (else None)."""
    if entity is None or (candidates and candidates[0][0] == entity):
        return candidates, confidence
    first = next((c for c in candidates or [] if c[0] == entity), None)
    if first is None:
        row = linker.index.resolve(entity)
        score = float(np.dot(vector, linker.index.vectors(np.asarray([row]))[0]))
        first = [entity, linker.index.entities.names[row], round(score, 5)]
    others = [c for c in candidates or [] if c[0] != entity]
    return [first, *others], (first[2] if isinstance(linker.nil, TopScoreNil) else None)
