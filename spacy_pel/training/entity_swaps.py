"""Entity swaps: training mentions whose words are replaced by another KB entity's name, in their context.

A retriever trained on an annotated corpus sees a few thousand entities; the KB has hundreds of
thousands, and at test time most mistakes are on entities no training mention named (BC5CDR dev:
unseen-entity R@1 0.88 against 0.95 for seen ones). Self-alignment on the KB's names alone (``adapt``)
teaches names without context, which does not carry over to mentions in a sentence
(``benchmarks/adapt_alone.md``). A swap keeps the sentence and changes the entity: for a share of the
training mentions, a copy is made whose mention words are one name of a random KB entity with the
gold one's types (a disease for a disease, a chemical for a chemical), and whose gold is that entity. The mention tower then learns from many more entities, each in the kind of context its type
appears in, at the cost of a sentence that no longer quite fits its mention.

The name is drawn from the entity's names written as running text (no ``Heading, Inverted`` comma
form); an entity with none (``Spt6 protein, Drosophila``) is passed over for another. Swaps are drawn once, from the training seed, so a
resumed run trains on the same examples.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from ..corpora import NIL, gold_ids
from ..pipeline.updating import Gold
from ..retrieval.index import EntityIndex

TRIES = 10  # random entities drawn for one swap before giving up on finding one with a running-text name


def running_text_names(names: Sequence[str]) -> List[str]:
    """The names a text would write as they are: those without an inverted ``A, B`` comma."""
    return [n for n in names if ", " not in n and n.strip()]


class EntitySwapper:
    """Draws swap copies of gold mentions against ``index`` (see the module doc)."""

    def __init__(self, index: EntityIndex, seed: int = 0):
        self.index = index
        self.rng = np.random.default_rng(seed)
        self._rows_of: Dict[Tuple[str, ...], np.ndarray] = {}

    def rows_typed_like(self, row: int) -> np.ndarray:
        """The KB rows with exactly ``row``'s types (a disease's, not also a psychology heading's), found
        once per type set."""
        key = tuple(self.index.entities.types[row])
        if key not in self._rows_of:
            self._rows_of[key] = self.index.entities.types.rows_typed_like(row)
        return self._rows_of[key]

    def swap(self, item: Gold) -> Gold | None:
        """A copy of ``item`` naming a random entity of a gold type instead, or None (NIL or no KB id)."""
        text, start, end, kb_id = item
        rows = [self.index.resolve(i) for i in gold_ids(kb_id) if i != NIL]
        rows = [r for r in rows if r is not None]
        if not rows:
            return None
        pool = self.rows_typed_like(rows[int(self.rng.integers(len(rows)))])
        for _ in range(TRIES):
            entity = self.index.entities[int(pool[int(self.rng.integers(len(pool)))])]
            names = running_text_names([entity.name, *entity.aliases])
            if names:
                name = names[int(self.rng.integers(len(names)))]
                return text[:start] + name + text[end:], start, start + len(name), entity.id
        return None

    def __call__(self, items: Sequence[Gold], share: float) -> List[Gold]:
        """Swap copies of ``share`` of ``items`` (at random, each at most once; ``share`` above 1 adds
        ``floor(share)`` copies of every item and a copy of the fraction left)."""
        if share <= 0 or not items:
            return []
        whole, part = divmod(share, 1.0)
        picks = [i for _ in range(int(whole)) for i in range(len(items))]
        picks += sorted(self.rng.choice(len(items), int(round(part * len(items))), replace=False).tolist())
        swapped = (self.swap(items[i]) for i in picks)
        return [s for s in swapped if s is not None]


def entity_swaps(items: Sequence[Gold], index: EntityIndex, share: float, seed: int = 0) -> List[Gold]:
    """Swap copies of ``share`` of the gold mentions ``items`` (:class:`EntitySwapper`)."""
    return EntitySwapper(index, seed)(items, share)
