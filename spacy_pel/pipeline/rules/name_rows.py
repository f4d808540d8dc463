"""``spacy_pel.rules.name_rows.v1``: candidates from a name-level index (:mod:`spacy_pel.retrieval.names`) merged
with the retrieved entity rows.

After retrieval, each open mention (not decided or tied by an earlier rule, and with a vector) is also
searched in the name index — every KB name and synonym as its own vector, an entity scored by its best
name — and its candidates become the top-k entities (each once) of the union by a combined score:

* ``mode = "max"``: the better of the entity-row score and the best-name score;
* ``mode = "names"``: the best-name score alone (the name index replaces the entity rows);
* ``mode = "mean"``: ``weight`` × best-name score + (1 − ``weight``) × entity-row score.

Both scores are computed exactly for every candidate of the union. With ``search = false`` the name
index is not searched: only the retrieved candidates are re-scored by their names, and the name vectors
stay on disk, read as candidates are scored (a few MB instead of ~580 MB for MeSH's 756,400 names, and
~0.3 ms instead of ~3 ms an open mention). On BC5CDR dev and NCBI/MEDIC it gave the same R@1 as the
search (``mode = "mean"``; benchmarks/accuracy.md), so the shipped configs use it.

``text_weight`` (default 0): the mention's own text (the lookup text: a defined short form's long form)
is also encoded by the entity tower as a name, without context — SapBERT's synonym match — and the
final score is ``(1 − text_weight)`` × the score above + ``text_weight`` × the text's best-name score
against each candidate (the name vectors are gathered once for both). The mention tower's vector
carries the context; the text's vector compares like with like (a name with names), which the trained
mention tower no longer does for text it was not trained on; it is also what tells a mention whose
entity the KB lacks (no name like it). The text pass is a second transformer pass over short inputs
(~0.7 ms an open mention on 2 CPU cores). ``names`` is a name index folder
(``python -m spacy_pel build-names KB_DIR`` writes ``KB_DIR/names``); it is saved with the pipeline
(``name_rows/``) and checked against the linker's entity encoder and KB when the linker sets up; a saved
copy made for another KB or encoder gives way to the ``names`` folder of the config (loading a pipeline
with another KB: ``config={"components.pel_linker.kb": KB, "components.pel_linker.rules.names.names":
KB_NAMES}``). With ``names`` null and no saved copy the rule is off, as ``alias_rows.v1`` is without aliases.
Write the rule before ``alias_table.v1`` to let the alias table have the last word on the mentions
whose text it knows.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import numpy as np
from spacy.util import registry

from ...models.encoder import BiEncoder
from ...retrieval.index import EntityIndex
from ...retrieval.names import NameIndex, encode_names
from ..config import LinkerPart
from .batch import CandidateBatch

NAMES_FOLDER = "name_rows"
MODES = ("max", "names", "mean")
NAME = "spacy_pel.rules.name_rows.v1"
CHUNK = 256  # mentions merged at once ([CHUNK, 2k, dim] entity vectors gathered)


EntityVectors = Callable[[np.ndarray], np.ndarray]  # KB rows → their float32 vectors (EntityIndex.vectors)


def merge_candidates(names: NameIndex, entity_vectors: EntityVectors, vectors: np.ndarray, rows: np.ndarray,
                     mode: str = "max", weight: float = 0.5, search: bool = True,
                     texts: Optional[np.ndarray] = None, text_weight: float = 0.0):
    """The top-k ``(scores, rows)`` of the retrieved entity rows ``rows`` and the name index's entities
    together (``search=False``: of ``rows`` alone, re-scored; ``entity_vectors`` reads the entity rows'
    vectors), by the combined score of ``mode`` (see the module doc); each entity once, best first.
    ``texts``: the mentions' own texts encoded as names (``[n, dim]``), whose best-name scores count
    ``text_weight`` of the final score."""
    parts = [_merge(names, entity_vectors, vectors[a : a + CHUNK], rows[a : a + CHUNK], mode, weight, search,
                    None if texts is None else texts[a : a + CHUNK], text_weight)
             for a in range(0, len(rows), CHUNK)]
    if not parts:
        return np.zeros(rows.shape, np.float32), np.full(rows.shape, -1, np.int64)
    return np.concatenate([s for s, _ in parts]), np.concatenate([r for _, r in parts])


def _merge(names: NameIndex, entity_vectors: EntityVectors, vectors: np.ndarray, rows: np.ndarray, mode: str,
           weight: float, search: bool, texts: Optional[np.ndarray], text_weight: float):
    k = rows.shape[1]
    if search:
        name_scores, name_rows = names.search(vectors, k)
        if mode == "names" and texts is None:
            return name_scores, name_rows
        both = np.sort(np.concatenate([rows, name_rows], axis=1), axis=1)
    else:
        both = np.sort(rows, axis=1)
    both[:, 1:][both[:, 1:] == both[:, :-1]] = -1  # each entity once
    valid = both >= 0
    entity = np.einsum("ncd,nd->nc", entity_vectors(np.where(valid, both, 0)), vectors)
    if texts is None:
        best_name = names.best_name_scores(vectors, both)
    else:
        best_name, text_name = names.best_name_scores(vectors, both, texts)
    if mode == "max":
        combined = np.maximum(entity, best_name)
    elif mode == "names":
        combined = np.where(np.isfinite(best_name), best_name, entity)
    else:
        combined = weight * np.where(np.isfinite(best_name), best_name, entity) + (1 - weight) * entity
    if texts is not None:
        combined = (1 - text_weight) * combined + text_weight * np.where(np.isfinite(text_name), text_name, 0.0)
    combined = np.where(valid, combined, -np.inf).astype(np.float32)
    order = np.argsort(-combined, axis=1, kind="stable")[:, :k]
    out_s, out_r = np.take_along_axis(combined, order, 1), np.take_along_axis(both, order, 1)
    missing = ~np.isfinite(out_s)
    out_s[missing], out_r[missing] = 0.0, -1
    return out_s, out_r.astype(np.int64)


def _check_share(setting: str, value, below_one: bool = False, where: str = NAME) -> None:
    """Refuse a setting of the rule ``where`` that is not a number in [0, 1] (``below_one``: in [0, 1))."""
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if not number or not (0.0 <= value < 1.0 if below_one else 0.0 <= value <= 1.0):
        raise ValueError(f"{where}: `{setting}` must be a number in [0, {'1)' if below_one else '1]'}, not {value!r}")


class NameRowsRule(LinkerPart):
    """Merges name-level candidates into the open mentions' candidates (see the module doc)."""

    data_name = "name_rows"
    where = NAME  # the registered name its messages give (a subclass's own)

    def __init__(self, names: Optional[str] = None, mode: str = "max", weight: float = 0.5, search: bool = True,
                 text_weight: float = 0.0):
        if names is not None and not isinstance(names, (str, Path)):
            raise ValueError(f"{NAME}: `names` must be a path or null, not {names!r}")
        if mode not in MODES:
            raise ValueError(f"{NAME}: `mode` must be one of {', '.join(MODES)}, not {mode!r}")
        _check_share("weight", weight, where=self.where)
        if not isinstance(search, bool):
            raise ValueError(f"{NAME}: `search` must be true or false, not {search!r}")
        _check_share("text_weight", text_weight, below_one=True, where=self.where)
        self.text_weight = float(text_weight)
        self.encoder: Optional[BiEncoder] = None
        self.source = str(names) if names else None
        self.mode, self.weight, self.search = mode, float(weight), search
        self.names: Optional[NameIndex] = None
        self.saved_copy = False  # names read from a saved pipeline (its `names` is the path they came from)
        self.index: Optional[EntityIndex] = None

    def setup(self, encoder: BiEncoder, index: EntityIndex) -> None:
        self.index, self.encoder = index, encoder
        if self.names is not None:  # the saved copy, unless it was built for another KB or encoder
            try:
                self.names.check(encoder, index.entities.ids, index.name_inputs)
                return
            except ValueError as err:
                if not self.source:
                    raise
                if self.saved_copy and not Path(self.source).exists():  # the path the copy came from, gone
                    raise ValueError(f"{NAME}: the pipeline's own name rows do not fit the KB or encoder it now has "
                                     f"({err}); set the rule's `names` to a name index of this KB (build-names) or "
                                     "null to turn the rule off") from None
                self.names = None
        if self.source:
            self.names = NameIndex.from_disk(self.source, in_memory=self.search)
            self.names.check(encoder, index.entities.ids, index.name_inputs)

    def to_disk(self, path: Path) -> bool:
        if self.names is None:
            return False
        self.names.to_disk(path / NAMES_FOLDER)
        return True

    def from_disk(self, path: Path) -> bool:
        if not (path / NAMES_FOLDER).exists():
            return False
        self.names = NameIndex.from_disk(path / NAMES_FOLDER, in_memory=self.search)
        self.saved_copy = True
        return True

    def __call__(self, batch: CandidateBatch) -> None:
        if self.index is None:
            raise ValueError(f"{self.where} is not set up (the linker does it when it loads its KB)")
        if self.names is None:  # no name index given: the rule is off
            return
        todo = np.array([i for i in range(len(batch.texts)) if batch.open(i) and np.any(batch.vectors[i])], np.int64)
        if len(todo) == 0:
            return
        texts = encode_names(self.encoder, [batch.texts[i] for i in todo]) if self.text_weight else None
        batch.scores[todo], batch.rows[todo] = merge_candidates(
            self.names, self.index.vectors, batch.vectors[todo], batch.rows[todo], self.mode, self.weight, self.search,
            texts, self.text_weight)


@registry.misc(NAME)
def name_rows_rule(names: Optional[str] = None, mode: str = "max", weight: float = 0.5, search: bool = True,
                   text_weight: float = 0.0) -> NameRowsRule:
    """Candidates from a name-level index (every KB name its own vector) merged with the entity rows
    (``search`` false: the retrieved candidates re-scored by their names, the vectors read from disk;
    ``text_weight``: the share of the mention text's own best-name similarity in the score)."""
    return NameRowsRule(names, mode, weight, search, text_weight)
