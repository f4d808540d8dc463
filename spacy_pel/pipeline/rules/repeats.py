"""``spacy_pel.rules.repeats.v1``: a repeated mention is encoded once.

A mention still open whose label and normalised lookup text are those of an earlier open mention of
the same document takes that mention's candidates (encoded once, in the first one's context; write it
after the rules that decide). Not exact: a later mention's own context no longer counts (BC5CDR dev
R@1 in benchmarks/speed.md).
"""
from __future__ import annotations

from typing import Dict

from spacy.util import registry

from ...kb import normalize
from .batch import CandidateBatch


class RepeatRule:
    """A repeated mention takes the candidates of its first open occurrence in the document."""

    def prepare(self, batch: CandidateBatch) -> None:
        start = 0
        for doc_spans in batch.spans:
            first: Dict[tuple, int] = {}
            for i in range(start, start + len(doc_spans)):
                if batch.open(i):
                    j = first.setdefault((doc_spans[i - start][2], normalize(batch.texts[i])), i)
                    if j != i:
                        batch.same_as[i] = j
            start += len(doc_spans)

    def __call__(self, batch: CandidateBatch) -> None:
        """Nothing to do after retrieval (``finish`` copies the first occurrence's candidates)."""


@registry.misc("spacy_pel.rules.repeats.v1")
def repeat_rule() -> RepeatRule:
    """A mention repeating an earlier open mention of its document (same label and normalised text)
    is encoded once: it takes that mention's candidates."""
    return RepeatRule()
