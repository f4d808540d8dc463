"""``spacy_pel.rules.char_ngrams.v1``: a sparse, spelling-level score beside the dense one (BioSyn's lesson).

Dense vectors blur what characters decide: code names (``KF 17837``), salts and spelling variants.
For every open mention (not decided, tied or chosen by name), each retrieved candidate gains
``weight`` × the cosine of character n-gram counts (``n``-grams of the text composed (NFC, as
:func:`spacy_pel.kb.normalize` does: ``e`` + U+0301 is ``é``), case-folded and padded with spaces)
between the mention's lookup text and the candidate's best-matching name or synonym; the candidates
are then re-sorted. Nothing is searched: only the retrieved candidates are re-scored, so a mention
whose entity was not retrieved gains nothing. Write it after the name rows and the alias
table, before the label types::

    [components.pel_linker.rules.char_ngrams]
    @misc = "spacy_pel.rules.char_ngrams.v1"
    weight = 0.2
"""
from __future__ import annotations

import math
import unicodedata
from collections import Counter
from functools import lru_cache
from typing import Optional

import numpy as np
from spacy.util import registry

from ...models.encoder import BiEncoder
from ...retrieval.index import EntityIndex
from ..config import LinkerPart

NAME = "spacy_pel.rules.char_ngrams.v1"


@lru_cache(maxsize=65536)
def ngram_vector(text: str, n: int = 3):
    """Unit-length character ``n``-gram counts of ``text`` (composed (NFC), case-folded, padded with a space each side)."""
    padded = f" {unicodedata.normalize('NFC', text).casefold()} "
    counts = Counter(padded[i : i + n] for i in range(max(1, len(padded) - n + 1)))
    norm = math.sqrt(sum(c * c for c in counts.values())) or 1.0
    return {g: c / norm for g, c in counts.items()}


def ngram_cosine(a: str, b: str, n: int = 3) -> float:
    va, vb = ngram_vector(a, n), ngram_vector(b, n)
    if len(va) > len(vb):
        va, vb = vb, va
    return sum(w * vb.get(g, 0.0) for g, w in va.items())


class CharNgramRule(LinkerPart):
    """Re-scores open mentions' candidates by dense score + ``weight`` × best-name n-gram cosine."""

    def __init__(self, weight: float = 0.2, n: int = 3):
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
            raise ValueError(f"{NAME}: `weight` must be a number ≥ 0, not {weight!r}")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 6:
            raise ValueError(f"{NAME}: `n` must be an integer within [1, 6], not {n!r}")
        self.weight, self.n = float(weight), n
        self.score_bonus = self.weight  # what it adds to a score at most (a threshold's range, :func:`..nil.threshold_range`)
        self.index: Optional[EntityIndex] = None

    def setup(self, encoder: BiEncoder, index: EntityIndex) -> None:
        self.index = index

    def best_name(self, text: str, row: int) -> float:
        entity = self.index.entities[row]
        return max(ngram_cosine(text, name, self.n) for name in (entity.name, *entity.aliases))

    def __call__(self, batch) -> None:
        if self.index is None:
            raise ValueError(f"{NAME} is not set up (the linker does it when it loads its KB)")
        if not self.weight:
            return
        for i, text in enumerate(batch.texts):
            if not batch.open(i) or i in batch.matched:
                continue
            rows = batch.rows[i]
            sparse = np.array([self.best_name(text, int(r)) if r >= 0 else 0.0 for r in rows])
            scores = np.where(rows >= 0, batch.scores[i] + self.weight * sparse, -np.inf)
            order = np.argsort(-scores, kind="stable")
            batch.scores[i] = np.where(np.isfinite(scores), scores, batch.scores[i])[order]
            batch.rows[i] = rows[order]


@registry.misc(NAME)
def char_ngram_rule(weight: float = 0.2, n: int = 3) -> CharNgramRule:
    """Open mentions' candidates re-scored with ``weight`` × character n-gram cosine to their best name."""
    return CharNgramRule(weight, n)
