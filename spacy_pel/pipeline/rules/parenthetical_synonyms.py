"""``spacy_pel.rules.parenthetical_synonyms.v1``: two mentions written ``A (B)`` name one entity.

Texts give a second name in parentheses — a brand or code name and its generic name (``CCNU
(lomustine)``, ``Mellaril (thioridazine)``), a name and its formula (``ammonia (NH3)``), a code and its
chemical name — and where one of the two is an abbreviation of the other, the abbreviation rule
(:mod:`.abbreviations`) already ties them. This rule ties the rest: for two mentions of one document with
the same label, the second right after the first inside parentheses, where exactly one of them is
decided by an earlier rule (the alias table knows its text) and the other is not, the other takes the
decided one's candidates — and when the other is tied by an earlier rule to a mention no rule decided
(a defined short form to its long form, a repeat to its first occurrence), that mention takes them, so
every mention tied to it follows: in ``…
1-(2-chloroethyl)-3-cyclohexyl-1-nitrosourea (CCNU) … CCNU (lomustine)`` the long form (no MeSH name)
and every ``CCNU`` link as ``lomustine``, a KB name, instead of as the long form's nearest record.
On BC5CDR dev, 278 of 282 such pairs share their gold entity. Write it after the rules that decide.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

from spacy.util import registry

from ..abbreviations import span_chars
from .batch import CandidateBatch

NAME = "spacy_pel.rules.parenthetical_synonyms.v1"
_OPEN = re.compile(r"\s*\(\s*")
_CLOSE = re.compile(r"\s*\)")


def parenthetical_pairs(docs: Sequence, spans: Sequence[list], doc_texts: Optional[Sequence[str]] = None) -> List[Tuple[int, int]]:
    """``(i, j)`` (flat indices over the docs' ``spans``, per doc ``(start, end, label)``): mention ``j``
    has mention ``i``'s label and is written right after it in parentheses, ``A (B)`` (``doc_texts``:
    the docs' texts, if already made)."""
    pairs, start = [], 0
    for d, (doc, doc_spans) in enumerate(zip(docs, spans)):
        if not doc_spans:
            continue
        text = doc.text if doc_texts is None else doc_texts[d]
        chars = span_chars(doc, doc_spans)
        by_start = {c[0]: n for n, c in enumerate(chars)}
        for n, (_, end, label) in enumerate(chars):
            opened = _OPEN.match(text, end)
            m = by_start.get(opened.end()) if opened else None
            if m is not None and chars[m][2] == label and _CLOSE.match(text, chars[m][1]):
                pairs.append((start + n, start + m))
        start += len(doc_spans)
    return pairs


class ParentheticalSynonymRule:
    """An open mention of an ``A (B)`` pair takes the candidates of the decided one (see the module doc)."""

    def prepare(self, batch: CandidateBatch) -> None:
        ties: Dict[int, int] = {}
        for i, j in parenthetical_pairs(batch.docs, batch.spans, batch.doc_texts):
            ri, rj = batch.root(i), batch.root(j)  # a mention tied by an earlier rule: the one it is tied to
            if ri in batch.decided and rj not in batch.decided:
                ties.setdefault(rj, ri)
            elif rj in batch.decided and ri not in batch.decided:
                ties.setdefault(ri, rj)
        batch.same_as.update(ties)

    def __call__(self, batch: CandidateBatch) -> None:
        """Nothing to do after retrieval (``finish`` copies the decided mention's candidates)."""


@registry.misc(NAME)
def parenthetical_synonym_rule() -> ParentheticalSynonymRule:
    """Of two mentions written ``A (B)`` with one label, an open one takes a decided one's candidates."""
    return ParentheticalSynonymRule()
