"""Candidate rules of ``pel_linker``: registered functions that adjust the retrieved candidates.

After retrieval the linker hands every rule of its ``rules`` block, in the order written, one
:class:`CandidateBatch` — the batch's mentions, their vectors and the top-k ``scores``/``rows`` — and
the rule changes it in place. Two come with the package:

* ``spacy_pel.rules.abbreviations.v1`` — a short form defined in its document (``retinoic acid (RA)``,
  :mod:`.abbreviations`) takes the candidates of a mention of its long form in the same document,
  or else is looked up by its long form in the rules that follow (write it before the alias table);
* ``spacy_pel.rules.alias_table.v1`` — a mention whose normalised text is a KB name or synonym, or a
  surface form of ``aliases`` (a JSON file from ``python -m spacy_pel.aliases``), is linked among
  those entities (:class:`.aliases.AliasTable`).

A rule of your own is any callable ``rule(batch) -> None`` registered in ``spacy.util.registry.misc``
(a :class:`.config.LinkerPart` if it needs the KB or holds data)::

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
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
from spacy.tokens import Doc
from spacy.util import registry

from ..models.encoder import BiEncoder
from ..retrieval.index import EntityIndex
from .abbreviations import short_form_links
from .aliases import AliasTable, read_aliases, write_aliases
from .config import LinkerPart

ALIASES_FILE = "aliases.json"


@dataclass
class CandidateBatch:
    """The mentions of a batch of docs with their retrieved candidates; rules edit it in place.

    ``spans``: per doc ``(start, end, label)``; ``texts``: one lookup text per mention (flat over the
    docs; the mention's text unless a rule rewrote it); ``vectors``: ``[n, dim]`` mention vectors;
    ``scores``/``rows``: ``[n, k]`` best first (row -1: no entity); ``same_as``: ``{i: j}``, mention
    ``i`` takes mention ``j``'s candidates once every rule has run.
    """

    docs: Sequence[Doc]
    spans: Sequence[list]
    texts: List[str]
    vectors: np.ndarray
    scores: np.ndarray
    rows: np.ndarray
    index: EntityIndex
    same_as: Dict[int, int] = field(default_factory=dict)

    def finish(self) -> None:
        """Apply ``same_as``."""
        for i, j in self.same_as.items():
            self.scores[i], self.rows[i] = self.scores[j], self.rows[j]


CandidateRule = Callable[[CandidateBatch], None]


class AbbreviationRule:
    """A defined short form is linked as its long form (see the module doc)."""

    def __call__(self, batch: CandidateBatch) -> None:
        lookup, copy_from = short_form_links(batch.docs, batch.spans, batch.texts)
        batch.texts = lookup
        batch.same_as.update(copy_from)


class AliasRule(LinkerPart):
    """Exact-match alias table over the KB's names (and ``aliases``' surface forms, saved with the pipeline)."""

    data_name = "aliases"

    def __init__(self, aliases: Optional[str] = None):
        if aliases is not None and not isinstance(aliases, (str, Path)):
            raise ValueError(f"spacy_pel.rules.alias_table.v1: `aliases` must be a path or null, not {aliases!r}")
        self.source = str(aliases) if aliases else None
        self.counts: Optional[Dict[str, Dict[str, int]]] = None
        self.table: Optional[AliasTable] = None

    def setup(self, encoder: BiEncoder, index: EntityIndex) -> None:
        if self.counts is None and self.source:
            self.counts = read_aliases(self.source)
        self.table = AliasTable(index, self.counts)

    def to_disk(self, path: Path) -> bool:
        if self.counts is None:
            return False
        write_aliases(self.counts, path / ALIASES_FILE)
        return True

    def from_disk(self, path: Path) -> bool:
        if not (path / ALIASES_FILE).exists():
            return False
        self.counts = read_aliases(path / ALIASES_FILE)
        return True

    def __call__(self, batch: CandidateBatch) -> None:
        if self.table is None:
            raise ValueError("the alias table is not set up (the linker does it when it loads its KB)")
        batch.scores, batch.rows = self.table.restrict(batch.texts, batch.vectors, batch.scores, batch.rows)


@registry.misc("spacy_pel.rules.abbreviations.v1")
def abbreviation_rule() -> AbbreviationRule:
    """A short form defined in its document is linked as its long form."""
    return AbbreviationRule()


@registry.misc("spacy_pel.rules.alias_table.v1")
def alias_table_rule(aliases: Optional[str] = None) -> AliasRule:
    """Exact-match alias table: KB names and synonyms, plus the surface forms of ``aliases``."""
    return AliasRule(aliases)
