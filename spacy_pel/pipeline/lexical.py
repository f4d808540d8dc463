"""British spelling variants of KB names: the lookup of ``spacy_pel.rules.spelling_variants.v1``.

A name's variant key is its normalised text (:func:`..kb.normalize`) with ``ae`` and ``oe`` folded
to ``e`` (``anaemia`` → ``anemia``, ``oedema`` → ``edema``, ``haemorrhage`` → ``hemorrhage``). The
same folding applies to KB names and mentions, so a key names the entities of every KB name that
folds to it; keys of two or more entities are left out. (Folding plurals too was measured and left
out: on BC5CDR dev against MeSH it decided ``citrate`` as ``Citrates`` where the gold is another
concept; the ``ae``/``oe`` folding decided 34 of 34 mentions right there, 28 of 28 against MEDIC.)
"""
from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple

from ..kb import normalize
from ..retrieval.table import NameIndex

AMBIGUOUS = -1  # a key shared by names of two or more entities


def variant_key(text: str) -> str:
    """The variant key of a name or mention text."""
    return normalize(text).replace("ae", "e").replace("oe", "e")


class VariantTable:
    """Variant key → the one KB row whose names fold to it."""

    def __init__(self, rows: Dict[str, int]):
        self.rows = rows

    @classmethod
    def from_names(cls, names: Iterable[Tuple[str, Iterable[int]]]) -> "VariantTable":
        """From (normalised name, KB rows) pairs."""
        rows: Dict[str, int] = {}
        for name, name_rows in names:
            key = variant_key(name)
            for row in name_rows:
                if rows.setdefault(key, int(row)) != row:
                    rows[key] = AMBIGUOUS
        return cls({k: r for k, r in rows.items() if r != AMBIGUOUS})

    @classmethod
    def from_name_index(cls, names: NameIndex) -> "VariantTable":
        ptr, rows = names.ptr, names.rows
        return cls.from_names((key, rows[ptr[i] : ptr[i + 1]].tolist()) for i, key in enumerate(names.keys))

    def row(self, text: str) -> Optional[int]:
        """The one KB row ``text``'s variant key names, or None."""
        return self.rows.get(variant_key(text))

    def __len__(self) -> int:
        return len(self.rows)
