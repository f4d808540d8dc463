"""Digests of a KB's contents that the files derived from it record, to be refused with another KB:
its ids in row order (:func:`ids_digest`: a name index, alias rows) and what its name rows are made of
(:func:`name_inputs_digest`: ids, names, synonyms and types, so that a next release with the same ids
but a synonym moved to another entity does not keep the name rows of the last)."""
from __future__ import annotations

import hashlib
import json
from typing import Sequence

import numpy as np

from ..kb import Entity
from .table import StringColumn


def ids_digest(ids: Sequence[str]) -> str:
    """SHA-256 of the KB's ids in row order (a name index belongs to one KB): of each id's UTF-8 bytes
    followed by a record separator (a :class:`.table.StringColumn` is hashed from its blob at once)."""
    h = hashlib.sha256()
    if isinstance(ids, StringColumn):
        blob = np.frombuffer(ids.blob, np.uint8)
        h.update(np.insert(blob, ids.offsets[1:], 0x1E).tobytes())
        return h.hexdigest()
    for entity_id in ids:
        h.update(entity_id.encode("utf8", "surrogatepass") + b"\x1e")
    return h.hexdigest()


def name_inputs_digest(entities: Sequence[Entity]) -> str:
    """SHA-256 of what name rows are made of: each entity's id, name, synonyms and types, in row order."""
    h = hashlib.sha256()
    for e in entities:
        h.update(json.dumps([e.id, e.name, list(e.aliases), list(e.types)]).encode() + b"\n")
    return h.hexdigest()
