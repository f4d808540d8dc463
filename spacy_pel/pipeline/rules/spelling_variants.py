"""``spacy_pel.rules.spelling_variants.v1``: a British spelling variant of one entity's names decides it.

A mention still open whose text is no KB name but whose British spelling folds (``ae``/``oe`` →
``e``) to the folded names of one entity only is decided as that entity before encoding.

A name's variant key is its normalised text (:func:`spacy_pel.kb.normalize`) with ``ae`` and ``oe`` folded
to ``e`` (``anaemia`` → ``anemia``, ``oedema`` → ``edema``, ``haemorrhage`` → ``hemorrhage``). The
same folding applies to KB names and mentions, so a key names the entities of every KB name that
folds to it; keys of two or more entities are left out. (Folding plurals too was measured and left
out: on BC5CDR dev against MeSH it decided ``citrate`` as ``Citrates`` where the gold is another
concept; the ``ae``/``oe`` folding decided 34 of 34 mentions right there, 28 of 28 against MEDIC.)
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, Iterable, List, Optional, Set, Tuple

import numpy as np
from spacy.util import registry

from ...kb import normalize
from ...models.encoder import BiEncoder
from ...retrieval.index import EntityIndex
from ...retrieval.table import NameIndex
from ..config import LinkerPart
from .batch import CandidateBatch


def variant_key(text: str) -> str:
    """The variant key of a name or mention text."""
    return normalize(text).replace("ae", "e").replace("oe", "e")


class VariantTable:
    """Variant key → the one KB row whose names fold to it.

    Only the names with ``ae`` or ``oe`` are folded and held (found in the name index's key column as
    bytes, not by decoding every key: building it over all of MeSH's names took 3.9 s at load); a name
    without them is its own variant key, looked up in the name index itself."""

    def __init__(self, names: NameIndex, folded: Dict[str, Set[int]]):
        self.names, self.folded = names, folded

    @classmethod
    def from_name_index(cls, names: NameIndex) -> "VariantTable":
        keys, ptr, rows = names.keys, names.ptr, names.rows
        blob = np.frombuffer(keys.blob, np.uint8)
        hits = np.flatnonzero(((blob[:-1] == ord("a")) | (blob[:-1] == ord("o"))) & (blob[1:] == ord("e")))
        folded: Dict[str, Set[int]] = defaultdict(set)
        for i in np.unique(np.searchsorted(keys.offsets, hits, side="right") - 1).tolist():
            folded[variant_key(keys[i])].update(rows[ptr[i] : ptr[i + 1]].tolist())
        return cls(names, dict(folded))

    @classmethod
    def from_names(cls, names: Iterable[Tuple[str, Iterable[int]]]) -> "VariantTable":
        """From (normalised name, KB rows) pairs."""
        merged: Dict[str, List[int]] = defaultdict(list)
        for name, name_rows in names:
            merged[name].extend(int(r) for r in name_rows)
        return cls.from_name_index(NameIndex.of({k: sorted(set(v)) for k, v in merged.items()}))

    def row(self, text: str) -> Optional[int]:
        """The one KB row ``text``'s variant key names, or None (no name, or names of several entities)."""
        key = variant_key(text)
        found = set(self.folded.get(key, ()))
        if "ae" not in key and "oe" not in key:  # the names without ae/oe that fold to key: key itself
            found.update(self.names.get(key) or ())
        return found.pop() if len(found) == 1 else None


class VariantRule(LinkerPart):
    """Decides open mentions whose spelling variant names one entity (see the module doc)."""

    data_name = "spelling_variants"

    def __init__(self):
        self.table: Optional[VariantTable] = None
        self.names = None

    def setup(self, encoder: BiEncoder, index: EntityIndex) -> None:
        self.names = index.entities.name_index()
        self.table = VariantTable.from_name_index(self.names)

    def prepare(self, batch: CandidateBatch) -> None:
        if self.table is None:
            raise ValueError("the variant table is not set up (the linker does it when it loads its KB)")
        for i, text in enumerate(batch.texts):
            if batch.open(i) and normalize(text) not in self.names:
                row = self.table.row(text)
                if row is not None:
                    batch.decided[i] = row

    def __call__(self, batch: CandidateBatch) -> None:
        """Nothing to do after retrieval (decided mentions already hold their entity)."""


@registry.misc("spacy_pel.rules.spelling_variants.v1")
def spelling_variant_rule() -> VariantRule:
    """A mention whose text is no KB name but whose British spelling (ae/oe → e) folds to the names
    of one entity only is linked to it without running the encoder."""
    return VariantRule()
