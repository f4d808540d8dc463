"""Corpus-level recall for found spans (the span finder's ``lexicon`` setting).

A training corpus teaches which strings its annotators mark (``tumors``, ``breast cancer``, ``ataxia-
telangiectasia``). The span model learns most of them, but a threshold γ tuned for F1 leaves out some
occurrences it gives a fair probability. With a lexicon — the training corpus's surface forms, as
``python -m spacy_pel aliases`` writes them (``{surface: {entity id: count}}``) — every token sequence
of ≤ ``max_len`` tokens whose normalised text is a surface form becomes a mention too, where:

* it overlaps no span already found (found spans are never changed), and
* the span model gives it at least ``floor`` (``support``, its probability of the span): a string the
  corpus marks in one sense stays out where the model is sure it is no mention here.

Among overlapping matches the more probable wins (greedy, as the span finder selects). A match
begins and ends on a token with a letter or digit (``galactosemia (`` is not a second match of
``galactosemia``).

With ``extend`` (:func:`lexicon_extensions`), a match may also *replace* found spans: one that holds
one or more found spans and cuts through none (``male breast cancer`` where the span model found
``male`` and ``breast cancer``, or only ``breast cancer``), again where the span model gives it at
least ``floor``: the annotators of the training corpus marked the longer string as one mention.

Measured on the raw text of NCBI disease dev and BC5CDR dev docs 100-499: ``benchmarks/e2e_lexicon.md``,
``benchmarks/e2e_lexicon_extend.md`` (with ``extend``).
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
    """Normalised surface forms, the first words they begin with (a token that begins none is skipped
    without building its n-grams) and every leading part of them (a token sequence whose normalised text
    is none cannot grow into a form: :func:`normalize` of a longer text begins with that of a shorter
    one), made once when the lexicon is read."""

    forms: FrozenSet[str]
    firsts: FrozenSet[str]
    prefixes: FrozenSet[str]

    def __len__(self) -> int:
        return len(self.forms)


def make_lexicon(forms: Iterable[str]) -> Lexicon:
    """Normalised surface forms (blank and wordless ones left out)."""
    kept = frozenset(k for k in (normalize(f) for f in forms) if any(c.isalpha() for c in k))
    prefixes = frozenset(k[:n] for k in kept for n in range(1, len(k) + 1))
    return Lexicon(kept, frozenset(k.split(" ", 1)[0] for k in kept), prefixes)


def read_lexicon(path: Union[str, Path]) -> Lexicon:
    """The surface forms of an aliases JSON file (``python -m spacy_pel aliases``)."""
    return make_lexicon(read_aliases(path, "the span finder's `lexicon`"))


def _matches(doc: Doc, lexicon: Lexicon, max_len: int, support: Callable[[int, int], float], floor: float,
             allowed: Callable[[int, int], bool]) -> List[Tuple[float, int, int]]:
    """``(probability, start, end)`` of every lexicon match that ``allowed`` lets through, with
    ``support`` ≥ ``floor``, beginning and ending on a token with a letter or digit."""
    matches = []
    text = doc.text
    starts = [t.idx for t in doc]
    ends = [t.idx + len(t) for t in doc]  # tokens i..j-1 are text[starts[i]:ends[j - 1]], as doc[i:j].text
    wordlike = [_wordlike(t.text) for t in doc]
    for i in range(len(doc)):
        if not wordlike[i] or normalize(doc[i].text).split(" ", 1)[0] not in lexicon.firsts:
            continue
        for j in range(i + 1, min(i + max_len, len(doc)) + 1):
            if not allowed(i, j):
                break
            key = normalize(text[starts[i] : ends[j - 1]])
            if key not in lexicon.prefixes:
                break
            if wordlike[j - 1] and key in lexicon.forms:
                p = support(i, j)
                if p >= floor:
                    matches.append((p, i, j))
    return matches


def _wordlike(text: str) -> bool:
    return any(c.isalnum() for c in text)


def _greedy(matches: List[Tuple[float, int, int]], taken: List[bool]) -> List[Tuple[int, int]]:
    """The more probable first among overlapping matches; marks their tokens in ``taken``."""
    kept = []
    for _, i, j in sorted(matches, key=lambda m: (-m[0], m[1], m[2])):
        if not any(taken[i:j]):
            taken[i:j] = [True] * (j - i)
            kept.append((i, j))
    return sorted(kept)


def lexicon_spans(doc: Doc, found: Sequence[Tuple[int, int, int]], lexicon: Lexicon, max_len: int,
                  support: Callable[[int, int], float], floor: float) -> List[Tuple[int, int]]:
    """The ``(start, end)`` of the lexicon's matches in ``doc`` that overlap none of ``found`` and
    have ``support`` ≥ ``floor``, the more probable first among overlapping ones; in document order."""
    if not lexicon:
        return []
    taken = [False] * len(doc)
    for a, b, _ in found:
        taken[a:b] = [True] * (b - a)
    matches = _matches(doc, lexicon, max_len, support, floor, lambda i, j: not taken[j - 1])
    return _greedy(matches, taken)


def lexicon_extensions(doc: Doc, found: Sequence[Tuple[int, int, int]], lexicon: Lexicon, max_len: int,
                       support: Callable[[int, int], float], floor: float) -> List[Tuple[int, int]]:
    """The ``(start, end)`` of the lexicon's matches that hold at least one of ``found`` (other than
    itself), cut through none and have ``support`` ≥ ``floor``; the more probable first among
    overlapping ones; in document order. The caller replaces the found spans they hold."""
    if not lexicon or not found:
        return []
    owner = [-1] * len(doc)  # the found span covering each token
    for n, (a, b, _) in enumerate(found):
        owner[a:b] = [n] * (b - a)
    bounds = [(a, b) for a, b, _ in found]

    def replaces(i: int, j: int) -> bool:
        """Tokens i..j hold found spans, only whole ones, and are not one found span themselves."""
        inside = {owner[t] for t in range(i, j)} - {-1}
        return bool(inside) and (i, j) not in bounds and all(i <= bounds[n][0] and bounds[n][1] <= j for n in inside)

    matches = [m for m in _matches(doc, lexicon, max_len, support, floor, lambda i, j: True) if replaces(m[1], m[2])]
    return _greedy(matches, [False] * len(doc))
