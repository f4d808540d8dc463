"""``spacy_pel.rules.alias_table.v1``: an exact-match alias table over the KB's names and surface forms.

A mention whose normalised text is a KB name or synonym, or a surface form of ``aliases`` (a JSON file
from ``python -m spacy_pel.aliases``), is linked among those entities (:class:`..aliases.AliasTable`);
with ``decide_unique`` (the default) a text that allows one entity only is decided before encoding —
the same id the encoder would pick. ``name_ties`` chooses among the entities of a KB name that the
annotated text does not know: ``"score"`` (all, by bi-encoder score) or ``"fewest_names"`` (the ones
with the fewest names first: an entity's own name rather than a broad heading's gathered synonym).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

from spacy.util import registry

from ...models.encoder import BiEncoder
from ...retrieval.index import EntityIndex
from ..aliases import AliasTable, check_name_ties, read_aliases, write_aliases
from ..config import LinkerPart
from .batch import CandidateBatch

ALIASES_FILE = "aliases.json"


class AliasRule(LinkerPart):
    """Exact-match alias table over the KB's names (and ``aliases``' surface forms, saved with the pipeline)."""

    data_name = "aliases"
    null_turns_off = True  # `aliases = null` at load: the saved forms stay unread

    def __init__(self, aliases: Optional[str] = None, decide_unique: bool = True, name_ties: str = "score"):
        if aliases is not None and not isinstance(aliases, (str, Path)):
            raise ValueError(f"spacy_pel.rules.alias_table.v1: `aliases` must be a path or null, not {aliases!r}")
        if not isinstance(decide_unique, bool):
            raise ValueError(f"spacy_pel.rules.alias_table.v1: `decide_unique` must be true or false, not {decide_unique!r}")
        check_name_ties(name_ties, "spacy_pel.rules.alias_table.v1")
        self.source = str(aliases) if aliases else None
        self.decide_unique = decide_unique
        self.name_ties = name_ties
        self.counts: Optional[Dict[str, Dict[str, int]]] = None
        self.table: Optional[AliasTable] = None

    def setup(self, encoder: BiEncoder, index: EntityIndex) -> None:
        if self.counts is None and self.source:
            self.counts = read_aliases(self.source)
        self.table = AliasTable(index, self.counts, self.name_ties)

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

    def _table(self) -> AliasTable:
        if self.table is None:
            raise ValueError("the alias table is not set up (the linker does it when it loads its KB)")
        return self.table

    def prepare(self, batch: CandidateBatch) -> None:
        """With ``decide_unique``: a text that allows exactly one entity decides the mention."""
        if not self.decide_unique:
            return
        table = self._table()
        for i, text in enumerate(batch.texts):
            if batch.open(i):
                allowed = table.candidates(text)
                if allowed is not None and len(allowed) == 1:
                    batch.decided[i] = allowed[0]

    def __call__(self, batch: CandidateBatch) -> None:
        open_ = [batch.open(i) for i in range(len(batch.texts))]
        texts = [t if o else "" for t, o in zip(batch.texts, open_)]  # "" matches no name
        batch.scores, batch.rows = self._table().restrict(texts, batch.vectors, batch.scores, batch.rows, found=batch.matched)


@registry.misc("spacy_pel.rules.alias_table.v1")
def alias_table_rule(aliases: Optional[str] = None, decide_unique: bool = True, name_ties: str = "score") -> AliasRule:
    """Exact-match alias table: KB names and synonyms, plus the surface forms of ``aliases``;
    ``decide_unique``: a text allowing one entity only is linked without running the encoder;
    ``name_ties``: among a KB name's entities, all by score or those with the fewest names."""
    return AliasRule(aliases, decide_unique, name_ties)
