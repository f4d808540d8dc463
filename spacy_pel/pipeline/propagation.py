"""Document-level consistency for found spans (the span finder's ``propagate`` setting).

Annotators of biomedical corpora mark every occurrence of a mention in a document, and define short
forms once: ``butylated hydroxyanisole (BHA)`` and then ``BHA`` throughout. A span model that found a
mention once may miss its later occurrences, so after selection:

1. a short form defined in the document (Schwartz & Hearst, :mod:`.abbreviations`) whose long form
   was found becomes a mention wherever it occurs, with the long form's label;
2. every other occurrence of a found mention's words (case-insensitive, same tokens; whitespace
   tokens — a line break, a double space — are transparent, as in the span finder) becomes a
   mention with its label;

in both cases only where the new span overlaps no found span (found spans are never changed), and,
given ``support`` (the span model's probability of a span), only where the model gives the new span at
least ``floor``: an occurrence the model is sure is no mention stays out (``VHL`` the gene, after
``von Hippel-Lindau disease (VHL)`` was found: NCBI disease dev).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from spacy.tokens import Doc

from ..kb import normalize
from .abbreviations import abbreviations, whole_word

Found = List[Tuple[int, int, int]]  # (start, end, label id) of one doc, as the span finder gives them


def _key(doc: Doc, start: int, end: int) -> Tuple[str, ...]:
    return tuple(t.lower_ for t in doc[start:end] if not t.is_space)


def _occurrences(words: Tuple[str, ...], lowered: List[str], by_first: Dict[str, List[int]]) -> List[int]:
    """Starts, among the doc's non-whitespace tokens (``lowered``), of the runs equal to ``words``."""
    n = len(words)
    return [k for k in by_first.get(words[0], []) if tuple(lowered[k : k + n]) == words]


def _wordy(words: Sequence[str]) -> bool:
    text = "".join(words)
    return len(text) >= 2 and any(c.isalpha() for c in text)


def propagate(doc: Doc, found: Found, support: Optional[Callable[[int, int], float]] = None, floor: float = 0.0) -> Found:
    """``found`` plus the spans the two rules of the module add, in document order; with ``support``,
    only those whose ``support(start, end)`` is at least ``floor``."""
    if not found:
        return list(found)
    taken = [False] * len(doc)
    for a, b, _ in found:
        taken[a:b] = [True] * (b - a)
    at = [t.i for t in doc if not t.is_space]  # the doc positions of the non-whitespace tokens
    lowered = [doc[i].lower_ for i in at]
    by_first: Dict[str, List[int]] = defaultdict(list)
    for k, word in enumerate(lowered):
        by_first[word].append(k)
    label_of = {}  # words → label of the first found span with them
    for a, b, label in sorted(found):
        label_of.setdefault(_key(doc, a, b), label)
    normal = {normalize(doc[a:b].text): label for a, b, label in found}
    wanted: Dict[Tuple[str, ...], int] = {}
    for short, long in abbreviations(doc.text).items():
        label = normal.get(normalize(long))
        where = whole_word(short).search(doc.text)
        span = doc.char_span(where.start(), where.end()) if label is not None and where else None
        if span is not None:  # the short form's tokens, as this doc's tokenizer cut them
            wanted.setdefault(_key(doc, span.start, span.end), label)
    for words, label in label_of.items():
        wanted.setdefault(words, label)
    added: Found = []
    for words, label in wanted.items():
        if not words or not _wordy(words):
            continue
        for k in _occurrences(words, lowered, by_first):  # whole matches only: k + len(words) ≤ len(at)
            i, j = at[k], at[k + len(words) - 1] + 1
            if not any(taken[i:j]) and (support is None or support(i, j) >= floor):
                added.append((i, j, label))
                taken[i:j] = [True] * (j - i)
    return sorted([*found, *added])
