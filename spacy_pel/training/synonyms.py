"""KB synonyms as mentions of their own entity: self-alignment in the retriever's own formats.

A synonym ``s`` of entity ``e`` becomes the mention input ``[CLS] [M_s] s [M_e] [SEP]`` (span pooled,
as a mention in text is) whose gold is ``e``'s KB row, encoded by the entity tower as the KB is
(``[CLS] name [SEP] types [SEP] synonyms [SEP]``). Training on these pairs teaches both towers the
KB's synonyms in exactly the formats retrieval compares -- unlike name-to-name pairs
(:mod:`spacy_pel.training.adapt`, ``objective = "names"``), which teach only the ``[CLS] name [SEP]``
format and leave a mention in context far from its entity (``benchmarks/encoder_adapt.md``).

:func:`split_synonyms` holds out whole entities: none of their synonyms is trained on, and one
synonym of each is a query of the held-out evaluation (its entity among the held-out entities and a
sample of the KB, re-encoded by the current entity tower), so a user with a KB and no annotated text
still selects the best model on something the model has not seen.
"""
from __future__ import annotations

import random
from typing import List, Optional, Protocol, Sequence, Tuple

import numpy as np

from ..kb import Entity, normalize
from ..models.encoder import BiEncoder, Mention


class NameLookup(Protocol):
    """Normalised name → the KB rows that have it (:meth:`.retrieval.table.EntityTable.name_index`)."""

    def get(self, key: str) -> Optional[List[int]]: ...


def synonym_pairs(entities: Sequence[Entity]) -> List[Tuple[str, int]]:
    """Every (synonym, KB row) pair: an entity's aliases that differ from its name."""
    return [(alias, row) for row, e in enumerate(entities) for alias in e.aliases if alias and alias != e.name]


def split_synonyms(entities: Sequence[Entity], held_out: int, seed: int
                   ) -> Tuple[List[Tuple[str, int]], List[Tuple[str, int]]]:
    """(training pairs, held-out queries): ``held_out`` random entities with a synonym are kept out of
    training (at most a tenth of them); each gives one held-out query (a synonym drawn with ``seed``)."""
    pairs = synonym_pairs(entities)
    if not held_out:
        return pairs, []
    rows = sorted({row for _, row in pairs})
    rng = random.Random(seed)
    held = set(rng.sample(rows, min(held_out, len(rows) // 10)))
    train = [p for p in pairs if p[1] not in held]
    per_row: dict = {}
    for alias, row in pairs:
        if row in held:
            per_row.setdefault(row, []).append(alias)
    queries = [(rng.choice(per_row[row]), row) for row in sorted(per_row)]
    return train, queries


def sample_pairs(pairs: List[Tuple[str, int]], limit: int, seed: int) -> List[Tuple[str, int]]:
    """At most ``limit`` pairs (0 = all), shuffled, the same for a seed."""
    rng = random.Random(seed)
    pairs = rng.sample(pairs, limit) if limit and len(pairs) > limit else list(pairs)
    rng.shuffle(pairs)
    return pairs


def pair_inputs(encoder: BiEncoder, pairs: Sequence[Tuple[str, int]], names: Optional[NameLookup] = None):
    """Mention inputs (no context) and gold rows of ``(synonym, row)`` pairs: the synonym's row and, with
    ``names`` (the KB's normalised names and synonyms → rows), every other entity the KB gives that name
    too, after it (a tuple: the first is the positive, the others only never negatives, as a composite
    mention's partners), so that an entity sharing a synonym is not pushed away from it."""
    inputs = encoder.mention_inputs([Mention(text, 0, len(text)) for text, _ in pairs])
    if names is None:
        return inputs, [{row} for _, row in pairs]
    return inputs, [(row, *sorted(set(names.get(normalize(text)) or ()) - {row})) for text, row in pairs]


def unique_rows(pairs: Sequence[Tuple[str, int]]) -> np.ndarray:
    return np.array(sorted({row for _, row in pairs}), np.int64)
