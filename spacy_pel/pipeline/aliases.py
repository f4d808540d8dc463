"""Exact-match alias table: a mention whose text is a known name is linked among that name's entities.

Two sources of names, both keyed by :func:`normalize` (case-folded, punctuation runs → one space):

* the KB's own names and synonyms (every entity of the index, built in memory when the linker loads);
  a text with a digit that matches no name is also looked up without its spaces (:func:`compact_key`:
  ``KF17837`` finds MeSH's ``KF 17837``, ``Ro15-1788`` its ``Ro 15-1788``);
* surface forms seen in annotated text (``python -m spacy_pel.aliases TRAIN.spacy -o aliases.json``):
  ``{surface: {entity id: count}}``, saved with the pipeline.

:meth:`AliasTable.restrict` decides per mention: a surface form seen in annotated text → its most frequent
entity (ties by bi-encoder score); else a KB name → the name's entity with the best bi-encoder score;
else nothing, and the bi-encoder's ranking stands. This is the alias-table baseline of scispaCy-style
linkers combined with the retriever, which ranks everything the table does not decide.

``name_ties`` chooses among the entities of a KB name (one the annotated text does not know):

* ``"score"`` — all of them, the best bi-encoder score first;
* ``"fewest_names"`` — those with the fewest names (distinct normalised names and synonyms), then the
  best score: a name that is a whole entity's own (``SJS`` of OMIM's *Schwartz-Jampel syndrome, type 1*,
  7 names) rather than one of the many a broad heading gathers (MEDIC's *Osteochondrodysplasias*, 59).
  ``benchmarks/name_ties.md``: a mixed effect, not the default.
"""
from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Union

import numpy as np

from ..corpora import gold_ids, gold_spans
from ..files import InputError, LineError, atomic_write, read_text
from ..kb import normalize
from ..retrieval.index import EntityIndex
from ..retrieval.table import compact_key

PathLike = Union[str, Path]
log = logging.getLogger(__name__)
# an alias table of which fewer surface forms than this share name an id the KB has is of another KB: said once
FOREIGN_TABLE_SHARE, FOREIGN_TABLE_MIN = 0.1, 20


def mention_counts(docs, nil_label: str = "NIL") -> Dict[str, Dict[str, int]]:
    """``{normalized surface: {entity id: count}}`` over the gold mentions of annotated docs
    (composite ids ``A|B`` count for each part; NIL mentions are left out)."""
    counts: Dict[str, Counter] = defaultdict(Counter)
    for doc in docs:
        for span in gold_spans(doc):
            key = normalize(span.text)
            ids = [i for i in gold_ids(span.kb_id_) if i != nil_label]
            if key and ids:
                counts[key].update(ids)
    return {k: dict(v) for k, v in sorted(counts.items())}


NAME_TIES = ("score", "fewest_names")


def check_name_ties(name_ties: str, owner: str) -> None:
    """Refuse a ``name_ties`` that is not one of :data:`NAME_TIES` (``owner`` names the setting's place)."""
    if name_ties not in NAME_TIES:
        raise ValueError(f"{owner}: `name_ties` must be one of {list(NAME_TIES)}, not {name_ties!r}")


class AliasTable:
    def __init__(self, index: EntityIndex, mentions: Optional[Dict[str, Dict[str, int]]] = None,
                 name_ties: str = "score"):
        check_name_ties(name_ties, "AliasTable")
        self.index = index
        self.name_ties = name_ties
        self.names = index.entities.name_index()  # normalised KB names and synonyms → rows
        self._name_counts: Optional[np.ndarray] = None
        # surface → [(row, count)] restricted to ids the KB has (an alternative id counts for its entity)
        self.seen: Dict[str, List[tuple]] = {}
        lookup = index.lookup
        for key, ids in (mentions or {}).items():
            rows: Counter = Counter()
            for i, c in ids.items():
                if i in lookup:
                    rows[lookup[i]] += c
            if rows:
                self.seen[key] = list(rows.items())
        if mentions and len(mentions) >= FOREIGN_TABLE_MIN and len(self.seen) < FOREIGN_TABLE_SHARE * len(mentions):
            log.warning(f"alias table: {len(mentions) - len(self.seen)} of its {len(mentions)} surface forms name only "
                        f"ids this KB ({len(index)} entities) lacks, and are not used: was it made for another KB? "
                        "(python -m spacy_pel aliases TRAIN.spacy -o ALIASES.json, with a corpus of this KB's ids)")

    def candidates(self, text: str) -> Optional[List[int]]:
        """KB rows the table allows for this surface form (most frequent in annotated text first), or None."""
        key = normalize(text)
        if key in self.seen:
            best = max(c for _, c in self.seen[key])
            return [r for r, c in self.seen[key] if c == best]
        found = self.names.get(key)
        compact = compact_key(key) if found is None else None
        if compact:  # a code name written with or without its spaces ("KF17837" for MeSH's "KF 17837")
            found = self.index.entities.compact_index().get(compact) or self.names.get(compact)
        if found and len(found) > 1 and self.name_ties == "fewest_names":
            counts = self.name_counts()[found]
            found = [r for r, c in zip(found, counts) if c == counts.min()]
        return found

    def name_counts(self) -> np.ndarray:
        """How many distinct normalised names each KB row has (counted once, when first asked)."""
        if self._name_counts is None:
            self._name_counts = np.bincount(self.names.rows, minlength=len(self.index.entities.ids))
        return self._name_counts

    def restrict(self, texts: Sequence[str], vectors: np.ndarray, scores: np.ndarray, rows: np.ndarray,
                 found: Optional[Set[int]] = None):
        """Re-rank retrieved ``(scores, rows)`` (``[n, k]``, best first): where the table knows a
        mention's text, its best-scoring allowed entity goes first with its own bi-encoder score and
        the other candidates follow in retrieval order (the last one drops off). ``found``, if given,
        receives the indices of the mentions the table knew."""
        scores, rows = scores.copy(), rows.copy()
        k = rows.shape[1]
        for i, text in enumerate(texts):
            allowed = self.candidates(text)
            if not allowed:
                continue
            if found is not None:
                found.add(i)
            allowed_scores = self.index.vectors(np.asarray(allowed)) @ vectors[i].astype(np.float32)
            j = int(np.argmax(allowed_scores))
            best_row, best_score = allowed[j], float(allowed_scores[j])
            keep = rows[i] != best_row
            rest_r, rest_s = rows[i][keep], scores[i][keep]
            rows[i] = np.concatenate([[best_row], rest_r])[:k]
            scores[i] = np.concatenate([[best_score], rest_s])[:k]
        return scores, rows


def write_aliases(counts: Dict[str, Dict[str, int]], path: PathLike) -> None:
    """Write the surface → id counts as JSON, atomically."""
    text = json.dumps(counts, ensure_ascii=False, indent=0)
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf8"))


def read_aliases(path: PathLike, setting: str = "an alias rule's `aliases`") -> Dict[str, Dict[str, int]]:
    """The ``{surface: {entity id: count}}`` of :func:`write_aliases` (a UTF-8 byte order mark is fine); a file
    that is missing, not UTF-8, not JSON or not of that shape is refused in one line (:class:`InputError`)
    naming the ``setting`` that gave it."""
    path = Path(path)
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from err
    except LineError as err:  # FILE:LINE: not UTF-8 text (byte 0x.. at column N)
        raise InputError(f"{err} (alias counts, {setting}: UTF-8 JSON, as "
                         "`python -m spacy_pel aliases` writes them)") from None
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise InputError(f"alias counts {path} not found ({setting}): make them with "
                         "`python -m spacy_pel aliases TRAIN.spacy --output FILE`, or set `aliases` to null") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise InputError(f"{path}: expected {{surface: {{entity id: count}}}}")
    return data
