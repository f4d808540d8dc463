"""Corpus-level recall for found spans (the span finder's ``lexicon`` setting).

A training corpus teaches which strings its annotators mark (``tumors``, ``breast cancer``, ``ataxia-
telangiectasia``). The span model learns most of them, but a threshold γ tuned for F1 leaves out some
occurrences it gives a fair probability. With a lexicon — the training corpus's surface forms, as
``python -m spacy_pel aliases`` writes them (``{surface: {entity id: count}}``) — every token sequence
of ≤ ``max_len`` tokens whose normalised text is a surface form becomes a mention too, where:

* it overlaps no span already found (found spans are never changed), and
* the span model gives it at least ``floor`` (``support``, its probability of the span): a string the
  corpus marks in one sense stays out where the model is sure it is no mention here.

Among overlapping matches the more probable wins (greedy, as the span finder selects). Measured on
the raw text of NCBI disease dev and BC5CDR dev docs 100-499: ``benchmarks/e2e_lexicon.md``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, FrozenSet, Iterable, List, Sequence, Tuple, Union

from spacy.tokens import Doc

from ..kb import normalize
from .aliases import read_aliases


@dataclass(frozen=True)
class Lexicon:
    """Normalised surface forms and the first words they begin with (a token that begins none is
    skipped without building its n-grams), made once when the lexicon is read."""

    forms: FrozenSet[str]
    firsts: FrozenSet[str]

    def __len__(self) -> int:
        return len(self.forms)


def make_lexicon(forms: Iterable[str]) -> Lexicon:
    """Normalised surface forms (blank and wordless ones left out)."""
    kept = frozenset(k for k in (normalize(f) for f in forms) if any(c.isalpha() for c in k))
    return Lexicon(kept, frozenset(k.split(" ", 1)[0] for k in kept))


def read_lexicon(path: Union[str, Path]) -> Lexicon:
    """The surface forms of an aliases JSON file (``python -m spacy_pel aliases``)."""
    return make_lexicon(read_aliases(path))


def lexicon_spans(doc: Doc, found: Sequence[Tuple[int, int, int]], lexicon: Lexicon, max_len: int,
                  support: Callable[[int, int], float], floor: float) -> List[Tuple[int, int]]:
    """The ``(start, end)`` of the lexicon's matches in ``doc`` that overlap none of ``found`` and
    have ``support`` ≥ ``floor``, the more probable first among overlapping ones; in document order."""
    if not lexicon:
        return []
    taken = [False] * len(doc)
    for a, b, _ in found:
        taken[a:b] = [True] * (b - a)
    matches = []
    for i in range(len(doc)):
        if taken[i] or normalize(doc[i].text).split(" ", 1)[0] not in lexicon.firsts:
            continue
        for j in range(i + 1, min(i + max_len, len(doc)) + 1):
            if taken[j - 1]:
                break
            if normalize(doc[i:j].text) in lexicon.forms:
                p = support(i, j)
                if p >= floor:
                    matches.append((p, i, j))
    added = []
    for _, i, j in sorted(matches, key=lambda m: (-m[0], m[1], m[2])):
        if not any(taken[i:j]):
            taken[i:j] = [True] * (j - i)
            added.append((i, j))
    return sorted(added)
