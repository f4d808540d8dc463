"""An earlier build's vectors for the records whose encoded input has not changed: a KB release update.

A KB's next release (MeSH every year, MEDIC every month, a user's catalogue every day) changes a few
percent of its entities, yet a build encodes all of them again (MeSH: ~8 min for the entities and ~7 for
the name rows on 2 cores). ``build-kb --reuse EARLIER_KB`` and ``build-names --reuse EARLIER_NAMES`` take
the vector of every entity whose encoded input — name, types and extra text (synonyms or description) — the
earlier folder holds (every name spelled as it was, for name rows), whatever its id or row, and encode only the
others. The earlier folder must come from the same entity encoder (fingerprint and entity settings) at
the same precision, and name rows from the same input kind and length; otherwise nothing is reused and
the report's ``reuse`` says why. A reused vector is the earlier folder's float16 row: what encoding the
entity again writes, up to the rounding that depends on which entities share its batch.

The earlier KB's inputs are rebuilt from its entity table under the ``entity_text`` choice whose texts
digest is its stamp's ``entities_sha256`` (a KB built before that choice existed, or with the other choice,
is read as it was encoded); a folder whose stamp matches neither reuses nothing. A KB grown with
``build-kb --add`` is read the same way, each added file's rows by the texts digest and precision its
``added`` entry records (a KB extended before they were recorded reuses nothing). ``build-kb --add`` reads the
choice the same way (:func:`other_entity_text`), and refuses to grow a KB whose rows read another.

The records still to encode go through the build's usual resumable chunks, stamped with their own
texts, so a resumed update never mixes chunks of another update or of a full build.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from ..kb import Entity
from ..models.encoder import BiEncoder
from ..models.pieces import ENTITY_TEXTS, entity_text_fields
from .chunks import STAMP_FILE, entity_texts_digest, read_stamp, texts_digest
from .index import EntityIndex
from .search import VectorFile
from .table import EntityTable

READ_ROWS = 65536  # earlier vectors read at once


@dataclass
class Reuse:
    """Per record, the earlier folder's row holding its vector (``-1``: to encode); ``reason`` says why
    nothing could be reused (empty when the folder qualified)."""

    source: str
    rows: np.ndarray
    vectors: Optional[Callable[[np.ndarray], np.ndarray]] = None  # earlier rows → float32 vectors
    reason: str = ""

    @property
    def reused(self) -> int:
        return int((self.rows >= 0).sum())

    def report(self) -> dict:
        out = {"from": self.source, "reused": self.reused, "encoded": int((self.rows < 0).sum())}
        return {**out, "not_reused_because": self.reason} if self.reason else out


def _none(source, n: int, reason: str) -> Reuse:
    return Reuse(str(source), np.full(n, -1, np.int64), None, reason)


def _match(keys: Sequence, earlier: Dict) -> np.ndarray:
    return np.fromiter((earlier.get(k, -1) for k in keys), np.int64, len(keys))


def earlier_entities(folder, entities: Sequence[Entity], encoder: BiEncoder) -> Reuse:
    """The rows of the KB folder ``folder`` whose vectors ``entities`` can take (see the module doc)."""
    folder = Path(folder)
    meta = EntityIndex.read_meta(folder)
    stamp = read_stamp(folder / STAMP_FILE) or {}
    settings = meta.get("encoder_entity_settings")
    if meta.get("encoder_fingerprint") != encoder.fingerprint() or (settings and settings != encoder.entity_settings()):
        return _none(folder, len(entities), "built by another entity encoder")
    added = stamp.get("added") or []
    if any(not isinstance(a, dict) or not {"entities", "entities_sha256", "precision"} <= set(a) for a in added):
        return _none(folder, len(entities), "extended with --add before the added rows' texts and precision were recorded")
    for part in (stamp, *added):  # the build's rows, then each --add's
        if part.get("precision") != encoder.resolved_precision:
            return _none(folder, len(entities), f"{'rows added with --add ' if part is not stamp else ''}encoded at "
                                                f"precision {part.get('precision') or 'unrecorded'}, not {encoder.resolved_precision}")
    # the entity table and the vector file only (not the KB's search matrix)
    table, file = EntityTable.read(folder), VectorFile(folder / "embeddings.npy")
    if len(table) != len(file) or meta.get("entities") != len(table):
        return _none(folder, len(entities), "its entity table and vectors disagree on the entity count")
    old = table[0 : len(table)]
    sizes = [int(a.get("entities", 0)) for a in added]
    sizes.insert(0, len(old) - sum(sizes))  # the build's own rows come first, then each --add's
    encoded: list = []
    for part, start, end in zip((stamp, *added), np.cumsum([0, *sizes[:-1]]), np.cumsum(sizes)):
        # the rows' inputs under each entity_text choice in turn, kept for the one their digest proves
        candidates = ([entity_text_fields(e, choice) for e in old[start:end]] for choice in ENTITY_TEXTS)
        fields = next((f for f in candidates if sizes[0] >= 0 and texts_digest(f) == part.get("entities_sha256")), None)
        if fields is None:
            return _none(folder, len(entities), "its stamp does not record the texts its rows encode")
        encoded += fields
    earlier: Dict[Tuple[str, ...], int] = {}
    for row, fields in enumerate(encoded):
        earlier.setdefault(fields, row)
    return Reuse(str(folder), _match([encoder.entity_text_fields(e) for e in entities], earlier), file.rows)


def other_entity_text(folder, entities: Sequence[Entity], entity_text: str) -> Optional[str]:
    """The ``entity_text`` choice, other than ``entity_text``, that the stamp of the KB folder ``folder`` (its
    entity table ``entities``) proves rows of it were encoded under: the build's rows, then each ``--add``'s, by
    the texts digest each records. None when every part agrees with ``entity_text`` or reads the same either way
    (no entity with both synonyms and a description), and where the stamp cannot tell (a KB built before
    stamps recorded texts, or a part whose row count is unrecorded: the parts after it are not checked)."""
    stamp = read_stamp(Path(folder) / STAMP_FILE) or {}
    start = 0
    for part in (stamp, *(stamp.get("added") or [])):
        size = part.get("entities") if isinstance(part, dict) else None
        if not isinstance(size, int) or start + size > len(entities):
            return None
        rows, start = entities[start : start + size], start + size
        digest = part.get("entities_sha256")
        if digest is None or entity_texts_digest(rows, entity_text) == digest:
            continue
        other = next((c for c in ENTITY_TEXTS if c != entity_text and entity_texts_digest(rows, c) == digest), None)
        if other is not None:
            return other
    return None


def earlier_names(folder, names: Sequence[str], encoder: BiEncoder, input: str, max_length: int, index) -> Reuse:
    """The rows of the name index ``index`` (read from ``folder``) whose vectors ``names`` can take:
    the same name string, encoded alone (``input="name"``) in as many word pieces by the same entity
    encoder at the same precision (its ``build_report.json``)."""
    try:
        report = json.loads((Path(folder) / "build_report.json").read_text(encoding="utf8"))
    except (OSError, ValueError):
        report = {}
    if index.fingerprint != encoder.fingerprint():
        return _none(folder, len(names), "built by another entity encoder")
    if input != "name" or index.input != "name" or index.max_length != max_length:
        return _none(folder, len(names), f"name rows of input {index.input!r} / {index.max_length} pieces; reused only "
                                         f"between 'name' rows of one length (this build: {input!r} / {max_length})")
    if report.get("precision") != encoder.resolved_precision:
        return _none(folder, len(names), f"encoded at precision {report.get('precision') or 'unrecorded'}, "
                                         f"not {encoder.resolved_precision}")
    earlier: Dict[str, int] = {}
    for row, name in enumerate(index.names):
        earlier.setdefault(name, row)
    return Reuse(str(folder), _match(names, earlier), lambda rows: index.name_vectors(rows).numpy())


def encode_reusing(records: Sequence, reuse: Optional[Reuse], encode: Callable[[Sequence], Tuple[np.ndarray, dict]],
                   dim: int) -> Tuple[np.ndarray, dict]:
    """Vectors of ``records``: the earlier ones ``reuse`` names, the others by ``encode`` (which returns
    vectors and its resume report); the report gains ``reuse`` (:meth:`Reuse.report`)."""
    if reuse is None or reuse.reused == 0:
        vectors, resume = encode(records)
        return vectors, ({**resume, "reuse": reuse.report()} if reuse is not None else resume)
    todo, keep = np.flatnonzero(reuse.rows < 0), np.flatnonzero(reuse.rows >= 0)
    new, resume = encode([records[i] for i in todo]) if len(todo) else (np.zeros((0, dim), np.float32), {})
    out = np.empty((len(records), dim), np.float32)
    out[todo] = new
    for a in range(0, len(keep), READ_ROWS):
        part = keep[a : a + READ_ROWS]
        out[part] = reuse.vectors(reuse.rows[part])
    return out, {**resume, "reuse": reuse.report()}
