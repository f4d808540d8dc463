"""The pipeline's own candidates with deeper ones appended, for recall@k beyond its ``top_k``.

The candidate rules re-score the candidates they are given (the name rows most of all), so a search
for more candidates can put another entity first: what ``nlp(doc)`` links comes from a pass with the
linker's ``top_k``. To measure recall@k for a larger k without changing what is linked, a second pass
with more candidates appends the entities the first lacks, in the second pass's order; the first
pass's ranks, NIL confidence and evidence stay as they are. ``python -m spacy_pel evaluate`` and
``pel_linker.score`` both measure this way.
"""
from __future__ import annotations

import numpy as np


def deepen(first, further):
    """One doc's linked mentions ``first`` (a :class:`~spacy_pel.pipeline.linker.Linked`) with the
    candidates of ``further`` (the same mentions linked with more candidates) that it lacks appended,
    as wide as the wider of the two (row -1, score 0: no entity)."""
    n = len(first.rows)
    width = max(first.rows.shape[1], further.rows.shape[1]) if n else first.rows.shape[1]
    rows = np.full((n, width), -1, dtype=first.rows.dtype)
    scores = np.zeros((n, width), dtype=first.scores.dtype)
    for m in range(n):
        own, more = first.rows[m], further.rows[m]
        keep = own >= 0
        new = (more >= 0) & ~np.isin(more, own[keep])
        r = np.concatenate([own[keep], more[new]])[:width]
        rows[m, : len(r)] = r
        scores[m, : len(r)] = np.concatenate([first.scores[m][keep], further.scores[m][new]])[:width]
    return first._replace(scores=scores, rows=rows)
