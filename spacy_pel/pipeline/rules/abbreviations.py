"""``spacy_pel.rules.abbreviations.v1``: a short form defined in its document is linked as its long form.

A short form defined in its document (``retinoic acid (RA)``, :mod:`..abbreviations`) takes the
candidates of a mention of its long form in the same document, or else is looked up by its long form
in the rules that follow (write it before the alias table).
"""
from __future__ import annotations

from spacy.util import registry

from ..abbreviations import short_form_links
from .batch import CandidateBatch


class AbbreviationRule:
    """A defined short form is linked as its long form (see the module doc)."""

    def prepare(self, batch: CandidateBatch) -> None:
        lookup, copy_from = short_form_links(batch.docs, batch.spans, batch.texts, batch.doc_texts)
        batch.texts = lookup
        batch.same_as.update(copy_from)

    def __call__(self, batch: CandidateBatch) -> None:
        """Nothing is left to do once the candidates exist (``prepare`` did the work)."""


@registry.misc("spacy_pel.rules.abbreviations.v1")
def abbreviation_rule() -> AbbreviationRule:
    """A short form defined in its document is linked as its long form."""
    return AbbreviationRule()
