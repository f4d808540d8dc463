"""Candidate rules of ``pel_linker``: registered functions that adjust the retrieved candidates.

A rule works in up to two phases, each over the rules in the order written. Before any vector is
computed, a rule with a ``prepare(batch)`` method may rewrite a mention's lookup text, tie it to
another mention (``same_as``) or decide it outright (``decided``: mention → KB row); decided and tied
mentions skip the encoder and the index search, so the transformer runs only on what is still open.
After retrieval every rule is called as ``rule(batch)`` with the vectors and the top-k
``scores``/``rows`` of the :class:`.batch.CandidateBatch`, and changes them in place. A decided
mention's candidates are its entity alone, with score :data:`.batch.DECIDED_SCORE` (it is never NIL
by threshold).

One module per registered rule, named as registered (``spacy_pel.rules.NAME.v1`` → ``rules/NAME.py``,
its doc says what it does): ``abbreviations``, ``alias_table``, ``repeats``, ``spelling_variants``,
``undefined_short_forms``, ``parenthetical_synonyms``, ``name_rows``, ``alias_rows``, ``char_ngrams``,
``rerank``; ``spacy_pel.rules.label_types.v1`` is in :mod:`..label_types` for now. The batch they
share is :mod:`.batch`. Importing this package registers them all.

A rule of your own is any callable ``rule(batch) -> None`` registered in ``spacy.util.registry.misc``
(a :class:`..config.LinkerPart` if it needs the KB or holds data)::

    @registry.misc("my_rules.no_digits.v1")
    def no_digits():
        def rule(batch):
            for i, text in enumerate(batch.texts):
                if text.isdigit():
                    batch.rows[i] = -1
        return rule

    [components.pel_linker.rules.no_digits]
    @misc = "my_rules.no_digits.v1"
"""
from . import (  # noqa: F401  (each registers its rule)
    abbreviations,
    alias_rows,
    alias_table,
    char_ngrams,
    name_rows,
    parenthetical_synonyms,
    repeats,
    rerank,
    spelling_variants,
    undefined_short_forms,
)
from .batch import DECIDED_SCORE, CandidateBatch  # noqa: F401
