"""The batch every candidate rule reads and edits: :class:`CandidateBatch` (see the package doc)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set

import numpy as np
from spacy.tokens import Doc

from ...retrieval.index import EntityIndex

DECIDED_SCORE = 1.0  # the score a rule-decided mention's one candidate carries


def span_label(doc, label) -> str:
    """A span tuple's label as a string (spans carry the label's hash or its string)."""
    if isinstance(label, str):
        return label
    return doc.vocab.strings[label] if label else ""


@dataclass
class CandidateBatch:
    """The mentions of a batch of docs with their retrieved candidates; rules edit it in place.

    ``spans``: per doc ``(start, end, label)``; ``texts``: one lookup text per mention (flat over the
    docs; the mention's text unless a rule rewrote it); ``vectors``: ``[n, dim]`` mention vectors;
    ``scores``/``rows``: ``[n, k]`` best first (row -1: no entity); ``same_as``: ``{i: j}``, mention
    ``i`` takes mention ``j``'s candidates once every rule has run; ``decided``: ``{i: row}``, mention
    ``i`` is linked to KB row ``row`` by a rule's ``prepare`` (no vector is computed for it);
    ``matched``: mentions whose candidates a rule chose by name after retrieval (the alias table);
    ``within``: ``{i: searcher}``, mention ``i`` is searched among a part of the KB only (set by a rule's
    ``prepare``: :meth:`~spacy_pel.retrieval.index.EntityIndex.among`; the others search the whole KB).
    ``vectors``, ``scores`` and ``rows`` are None during ``prepare``; afterwards the rows of decided
    and tied mentions hold zeros / their final candidates.
    """

    docs: Sequence[Doc]
    spans: Sequence[list]
    texts: List[str]
    vectors: Optional[np.ndarray]
    scores: Optional[np.ndarray]
    rows: Optional[np.ndarray]
    index: EntityIndex
    same_as: Dict[int, int] = field(default_factory=dict)
    decided: Dict[int, int] = field(default_factory=dict)
    matched: Set[int] = field(default_factory=set)
    within: Dict[int, Any] = field(default_factory=dict)
    _doc_texts: Optional[List[str]] = field(default=None, repr=False)
    _labels: Optional[List[str]] = field(default=None, repr=False)

    @property
    def doc_texts(self) -> List[str]:
        """Each doc's text ("" for a doc without mentions), made once a batch for all the rules
        (``Doc.text`` joins a Token object per token each time it is read)."""
        if self._doc_texts is None:
            self._doc_texts = [doc.text if sp else "" for doc, sp in zip(self.docs, self.spans)]
        return self._doc_texts

    @property
    def labels(self) -> List[str]:
        """Each mention's label as a string (flat over the docs), made once a batch."""
        if self._labels is None:
            self._labels = [span_label(doc, label) for doc, spans in zip(self.docs, self.spans) for _, _, label in spans]
        return self._labels

    def open(self, i: int) -> bool:
        """Whether mention ``i`` is still to be encoded and retrieved (neither decided nor tied)."""
        return i not in self.decided and i not in self.same_as

    def finish(self) -> None:
        """Apply ``same_as``, following chains (``i`` → ``j`` → ``k``: ``i`` takes ``k``'s candidates)."""
        for i in self.same_as:
            j = self.root(i)
            self.scores[i], self.rows[i] = self.scores[j], self.rows[j]

    def root(self, i: int) -> int:
        """The mention whose candidates mention ``i`` takes (itself unless tied; a cycle stops where it closes)."""
        seen = {i}
        while i in self.same_as and self.same_as[i] not in seen:
            i = self.same_as[i]
            seen.add(i)
        return i

    def by_rule(self) -> List[bool]:
        """Per mention: whether a rule chose its candidates (decided or matched, itself or the mention it is tied to)."""
        chosen = set(self.decided) | self.matched
        return [self.root(i) in chosen for i in range(len(self.texts))]
