"""``spacy_pel.rules.undefined_short_forms.v1``: an undefined short form takes its long form's candidates.

A mention still open that looks like a short form (``OAB``) in a document that never defines it takes
the candidates of the one mention of its document and label whose text is its Schwartz & Hearst long
form (``overactive bladder``; :func:`..abbreviations.undefined_short_form_links`); write it after the
rules that decide.
"""
from __future__ import annotations

from spacy.util import registry

from ..abbreviations import undefined_short_form_links
from .batch import CandidateBatch


class UndefinedShortFormRule:
    """An open mention that looks like a short form takes the candidates of its long form's mention."""

    def prepare(self, batch: CandidateBatch) -> None:
        still_open = [batch.open(i) for i in range(len(batch.texts))]
        batch.same_as.update(undefined_short_form_links(batch.docs, batch.spans, still_open))

    def __call__(self, batch: CandidateBatch) -> None:
        """Nothing to do after retrieval (``finish`` copies the long form's candidates)."""


@registry.misc("spacy_pel.rules.undefined_short_forms.v1")
def undefined_short_form_rule() -> UndefinedShortFormRule:
    """A mention still open that looks like a short form (``OAB``) takes the candidates of the one
    mention of its document and label whose text is its long form (``overactive bladder``) when the
    document never defines it. Put it after the rules that decide."""
    return UndefinedShortFormRule()
