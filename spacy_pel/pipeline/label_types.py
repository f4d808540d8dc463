"""``spacy_pel.rules.label_types.v1``: candidates whose KB types do not go with the span's label move down.

A ``Chemical`` span linked to a disease, or a ``Disease`` span linked to a drug, is a mistake the
retriever makes on short and unseen mentions (BC5CDR dev: ``eserine`` → Uterine Diseases, ``OAB`` →
Ointments). The rule lowers the score of every retrieved candidate that has none of the KB types its
span's label goes with by ``penalty`` and re-sorts, so a candidate of a fitting type comes first when
there is one; where none fits, nothing changes. Mentions a rule decided before encoding, or whose
candidates the alias table chose by name, are left as they are.

A label whose fitting entities are at most ``search_share`` of the KB (BC5CDR's ``Disease``: 12,682 of
MeSH's 354,068 rows) is searched among them only, exactly, before the re-ranking: its mentions get
fitting candidates only, and the search costs a fraction (BC5CDR dev: the whole pipeline 20-35% faster,
R@1 unchanged; ``benchmarks/label_search.md``). A label that covers more of the KB (``Chemical``: 73%)
searches the whole KB, as does a label of a KB with no entity of its types; ``search_share = 0`` turns it
off. In an approximate (``hnsw``, ``ivfpq``) KB the fitting rows are searched exactly too, from their saved
vectors (read once, held in memory: ~0.77 kB a row in bf16).

``label_types`` maps a span label to KB types (for MeSH: tree categories such as ``Chemicals and
Drugs``); ``python -m spacy_pel calibrate`` learns the same map from a corpus for the NIL classifier
(:func:`~spacy_pel.evaluation.nil.label_types`). A span label finds its entry exactly, else case aside,
else by the one key its name contains or that contains it (:mod:`.label_names`: ``CHEMICAL`` and
``ChemicalEntity`` find ``Chemical``); labels it does not name are left alone. Write the rule
after the alias table, so that it knows which mentions the table matched::

    [components.pel_linker.rules.label_types]
    @misc = "spacy_pel.rules.label_types.v1"
    penalty = 1.0
    search_share = 0.5

    [components.pel_linker.rules.label_types.label_types]
    Chemical = ["Chemicals and Drugs"]
    Disease = ["Diseases", "Psychiatry and Psychology"]
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from spacy.util import registry

from ..models.encoder import BiEncoder
from ..retrieval.index import EntityIndex
from ..retrieval.search import SubsetSearch
from .config import LinkerPart
from .label_names import LabelMap


class LabelTypesRule(LinkerPart):
    """Re-ranks retrieved candidates so that those of a type fitting the span's label come first."""

    def __init__(self, label_types: Dict[str, Sequence[str]], penalty: float = 1.0, search_share: float = 0.5):
        if not isinstance(label_types, dict) or not all(isinstance(v, (list, tuple)) for v in label_types.values()):
            raise ValueError("spacy_pel.rules.label_types.v1: `label_types` must map a label to a list of KB types")
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or penalty < 0:
            raise ValueError(f"spacy_pel.rules.label_types.v1: `penalty` must be a number ≥ 0, not {penalty!r}")
        if isinstance(search_share, bool) or not isinstance(search_share, (int, float)) or not 0 <= search_share <= 1:
            raise ValueError(f"spacy_pel.rules.label_types.v1: `search_share` must be a number in [0, 1], not {search_share!r}")
        self.allowed = LabelMap({str(label): set(types) for label, types in label_types.items()})
        self.penalty, self.search_share = float(penalty), float(search_share)
        self.index: Optional[EntityIndex] = None
        # map key → (the KB's size when made, its searcher): made when first wanted, again if entities were added
        self._among: Dict[str, Tuple[int, Optional[SubsetSearch]]] = {}

    def setup(self, encoder: BiEncoder, index: EntityIndex) -> None:
        self.index, self._among = index, {}

    def searcher(self, label: str) -> Optional[SubsetSearch]:
        """The search among the entities that fit ``label``, or None when the whole KB is searched."""
        key = self.allowed.key_for(label)
        if key is None:
            return None
        size, searcher = self._among.get(key, (-1, None))
        if size != len(self.index):
            rows = self.index.entities.types.rows_with_any(self.allowed[key])
            small = 0 < len(rows) <= self.search_share * len(self.index)
            searcher = self.index.among(rows) if small else None
            self._among[key] = (len(self.index), searcher)
        return searcher

    def prepare(self, batch) -> None:
        """Open mentions of a label with few fitting entities are searched among those only."""
        if self.index is None:
            raise ValueError("spacy_pel.rules.label_types.v1 is not set up (the linker does it when it loads its KB)")
        if not self.search_share:
            return
        for i, label in enumerate(batch.labels):
            searcher = self.searcher(label) if batch.open(i) else None
            if searcher is not None:
                batch.within[i] = searcher

    def misfits(self, rows: np.ndarray, allowed: set) -> np.ndarray:
        """Per candidate row: True where it is an entity without any of the ``allowed`` types."""
        types = self.index.entities.types
        return np.array([r >= 0 and not allowed.intersection(types[int(r)]) for r in rows], dtype=bool)

    def __call__(self, batch) -> None:
        if self.index is None:
            raise ValueError("spacy_pel.rules.label_types.v1 is not set up (the linker does it when it loads its KB)")
        for i, label in enumerate(batch.labels):
            allowed = self.allowed.for_label(label)
            # decided: one candidate; tied: takes its mention's; matched: a KB name chose the candidates, and
            # a name match outranks a type (with the alias table not deciding, typing those cost 1 pt R@1)
            if not allowed or not batch.open(i) or i in batch.matched:
                continue
            bad = self.misfits(batch.rows[i], allowed)
            if not bad.any() or bad[batch.rows[i] >= 0].all():
                continue
            scores = batch.scores[i] - self.penalty * bad
            scores[batch.rows[i] < 0] = -np.inf  # empty slots stay last
            order = np.argsort(-scores, kind="stable")
            batch.scores[i] = np.where(np.isfinite(scores), scores, batch.scores[i])[order]
            batch.rows[i] = batch.rows[i][order]


@registry.misc("spacy_pel.rules.label_types.v1")
def label_types_rule(label_types: Dict[str, List[str]], penalty: float = 1.0, search_share: float = 0.5) -> LabelTypesRule:
    """Candidates whose KB types do not go with the span's label move down by ``penalty``; a label whose
    fitting entities are at most ``search_share`` of the KB is searched among them only."""
    return LabelTypesRule(label_types, penalty, search_share)
