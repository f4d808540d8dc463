"""``spacy_pel.rules.alias_rows.v1``: the surface forms of annotated text as name rows of the dense index.

The alias table (:mod:`..aliases`) links a mention whose text is exactly a surface form seen in annotated
text; this rule is its dense half. Every surface form of ``aliases`` (``python -m spacy_pel.aliases``)
is encoded by the entity tower as a name (``[CLS] form [SEP]``, :mod:`spacy_pel.retrieval.names`; the forms
are the alias file's normalised keys: lower case, punctuation runs as one space), one row per
(form, entity) pair. An open mention (not decided or tied by an earlier rule, with a vector) then also
searches these rows, and its candidates become the top-k entities of the union of the retrieved entity
rows and the forms' entities, each scored by the better of its entity-row score and its best form's
score (:func:`.name_rows.merge_candidates`, ``mode = "max"``). So ``decreased renal function`` can reach
``Renal Insufficiency`` through a training mention ``renal dysfunction`` although no KB name is near it.

The surface forms and their vectors are saved with the pipeline (``alias_rows/``); the vectors are
encoded again when the linker's entity encoder or KB is not the one they were made with: another entity
encoder, other ids, or forms that resolve to other entities (a release with the same ids but other
alternative ids: ``lithium citrate``, annotated with the withdrawn ``C1``, gains a row once ``C1`` is an
alternative id of ``D1``). Write the rule
before ``alias_table.v1`` so that the alias table keeps the last word on the texts it knows. With
``aliases = null`` (no annotated text) the rule does nothing, as the alias table then has KB names only.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
from spacy.util import registry

from ...models.encoder import BiEncoder
from ...retrieval.digests import ids_digest
from ...retrieval.index import EntityIndex
from ...retrieval.names import NameIndex, encode_names
from ..aliases import read_aliases, write_aliases
from .name_rows import MODES, NameRowsRule

NAME = "spacy_pel.rules.alias_rows.v1"
FOLDER = "alias_rows"
ALIASES_FILE, VECTORS_FOLDER = "aliases.json", "vectors"


def form_rows(counts: Dict[str, Dict[str, int]], index: EntityIndex) -> Tuple[List[str], List[int]]:
    """The (form, KB row) pairs of ``counts``: each form's ids resolved by ``index`` (ids and alternative ids)."""
    forms, rows = [], []
    lookup = index.lookup
    for form, ids in counts.items():
        for row in sorted({lookup[i] for i in ids if i in lookup}):
            forms.append(form)
            rows.append(row)
    return forms, rows


def same_rows(names: NameIndex, counts: Dict[str, Dict[str, int]], index: EntityIndex) -> bool:
    """True when the saved rows ``names`` are the (form, row) pairs ``counts`` resolve to in ``index`` (in any order)."""
    forms, rows = form_rows(counts, index)
    return len(forms) == len(names) and set(zip(forms, rows)) == set(zip(names.names, names.entity_rows.tolist()))


def alias_name_index(counts: Dict[str, Dict[str, int]], encoder: BiEncoder, index: EntityIndex) -> NameIndex:
    """The name index of the surface forms in ``counts``: one row per (form, entity the KB has)."""
    forms, rows = form_rows(counts, index)
    ids = index.entities.ids
    return NameIndex(encode_names(encoder, forms), np.asarray(rows, np.int32), forms, entities=len(ids),
                     ids_sha256=ids_digest(ids), fingerprint=encoder.fingerprint())


class AliasRowsRule(NameRowsRule):
    """Merges the nearest annotated surface forms' entities into the open mentions' candidates."""

    data_name = FOLDER
    where = NAME
    null_turns_off = True  # `aliases = null` at load: the saved forms stay unread

    def __init__(self, aliases: Optional[str] = None, mode: str = "max", weight: float = 0.5):
        if aliases is not None and not isinstance(aliases, (str, Path)):
            raise ValueError(f"{NAME}: `aliases` must be a path or null, not {aliases!r}")
        if mode not in MODES:
            raise ValueError(f"{NAME}: `mode` must be one of {', '.join(MODES)}, not {mode!r}")
        super().__init__(None, mode, weight)
        self.source = str(aliases) if aliases else None
        self.counts: Optional[Dict[str, Dict[str, int]]] = None

    def setup(self, encoder: BiEncoder, index: EntityIndex) -> None:
        self.index = index
        if self.counts is None:
            if not self.source:  # no annotated text (as the alias table without `aliases`): nothing to add
                return
            self.counts = read_aliases(self.source)
            self.names = None
        if self.names is not None:
            try:
                self.names.check(encoder, index.entities.ids)
            except ValueError:  # another encoder or KB: the forms are encoded again
                self.names = None
        # the same ids, but forms resolved to other rows (alternative ids added or moved): encoded again too
        if self.names is not None and not same_rows(self.names, self.counts, index):
            self.names = None
        if self.names is None:
            self.names = alias_name_index(self.counts, encoder, index)

    def __call__(self, batch) -> None:
        if self.counts is not None:
            super().__call__(batch)

    def to_disk(self, path: Path) -> bool:
        if self.counts is None:
            return False
        write_aliases(self.counts, path / FOLDER / ALIASES_FILE)
        if self.names is not None:
            self.names.to_disk(path / FOLDER / VECTORS_FOLDER)
        return True

    def from_disk(self, path: Path) -> bool:
        if not (path / FOLDER / ALIASES_FILE).exists():
            return False
        self.counts = read_aliases(path / FOLDER / ALIASES_FILE)
        vectors = path / FOLDER / VECTORS_FOLDER
        self.names = NameIndex.from_disk(vectors) if vectors.exists() else None
        return True


@registry.misc(NAME)
def alias_rows_rule(aliases: Optional[str] = None, mode: str = "max", weight: float = 0.5) -> AliasRowsRule:
    """The surface forms of ``aliases`` as name rows of the dense index, merged with the entity rows."""
    return AliasRowsRule(aliases, mode, weight)
