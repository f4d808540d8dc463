"""The entity table of a KB folder: ids, names and types as columns, whole records read on demand.

Linking reads only an entity's id, name and types, and the alias table only its normalised names; parsing
every record of ``entities.jsonl`` when a pipeline loads took 5.6 s for MeSH (354,068 records) and
~370 MB. So a KB folder also holds, written with it::

    columns.json     {"type_sets": [[...], ...], "alt_ids": {alt id: row}}
    ids.bin          the ids, one UTF-8 blob (+ ids.offsets.npy), and ids.order.npy: the rows by sorted id
    names.bin        the names, one UTF-8 blob (+ names.offsets.npy)
    types.npy        each entity's row of type_sets (int32)
    offsets.npy      byte offset of each record's line in entities.jsonl (int64, n + 1)
    name_keys.bin    the sorted normalised names and synonyms, the alias table's keys (+ .offsets.npy)
    name_rows.npy    CSR of those keys' KB rows: name_ptr.npy (int64, keys + 1) → name_rows.npy (int32)
    compact_*        the same for the space-free forms of the keys with a digit and a space
                     (:func:`compact_key`; a folder written before them builds them on first use)

and :class:`EntityTable` reads a record (aliases, description, extra) from its line only when asked.
A KB folder without these files (written before them) is read the old way, from entities.jsonl.
"""
from __future__ import annotations

import bisect
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union, overload

import numpy as np

from ..kb import Entity, normalize, write_jsonl
from .search import OpenedFile

PathLike = Union[str, Path]
RECORDS = "entities.jsonl"
COLUMNS = "columns.json"
IDS, ID_ORDER = "ids", "ids.order.npy"
NAMES = "names"
TYPES = "types.npy"
OFFSETS = "offsets.npy"
NAME_KEYS = "name_keys"
NAME_PTR = "name_ptr.npy"
NAME_ROWS = "name_rows.npy"
COMPACT = "compact_"  # prefix of the compact name index's files
LOOKUP_CACHE = 100_000  # names whose lookups a NameIndex remembers


class StringColumn(Sequence[str]):
    """Strings kept as one UTF-8 blob + offsets (a Python str per entity costs ~60 bytes more: 300 MB
    more for the names and keys of a 2.4M-entity KB). Bisection works on it like on a sorted list."""

    def __init__(self, blob: bytes = b"", offsets: Optional[np.ndarray] = None):
        self.blob = blob
        self.offsets = np.zeros(1, np.int64) if offsets is None else offsets

    @classmethod
    def of(cls, strings: Sequence[str]) -> "StringColumn":
        encoded = [x.encode("utf8") for x in strings]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        return cls(b"".join(encoded), offsets)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return self.blob[self.offsets[i] : self.offsets[i + 1]].decode("utf8")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    def extend(self, strings: Sequence[str]) -> None:
        more = StringColumn.of(strings)
        self.blob += more.blob
        self.offsets = np.concatenate([self.offsets, self.offsets[-1] + more.offsets[1:]])

    def write(self, folder: Path, name: str) -> None:
        (folder / f"{name}.bin").write_bytes(self.blob)
        np.save(folder / f"{name}.offsets.npy", self.offsets, allow_pickle=False)

    @classmethod
    def read(cls, folder: Path, name: str) -> "StringColumn":
        return cls((folder / f"{name}.bin").read_bytes(), np.load(folder / f"{name}.offsets.npy", allow_pickle=False))


_DIGIT = re.compile(r"\d")


def compact_key(key: str) -> Optional[str]:
    """The space-free form of a normalised name or mention text with a digit (``"kf 17837"`` and
    ``"kf17837"`` → ``"kf17837"``; ``"ro 15 1788"`` → ``"ro151788"``), else None: code names are
    written with and without their spaces (MeSH's ``KF 17837``, ``Ro 15-1788`` are ``KF17837``,
    ``Ro15-1788`` in text)."""
    return key.replace(" ", "") if _DIGIT.search(key) else None


def _find(ordered: Sequence[str], key: str) -> Optional[int]:
    """The position of ``key`` in the sorted sequence ``ordered``, or None."""
    i = bisect.bisect_left(ordered, key)
    return i if i < len(ordered) and ordered[i] == key else None


class NameIndex:
    """Normalised KB names and synonyms → KB rows (sorted keys, looked up by bisection)."""

    def __init__(self, keys: StringColumn, ptr: np.ndarray, rows: np.ndarray):
        self.keys, self.ptr, self.rows = keys, ptr, rows
        self._seen: Dict[str, Optional[tuple]] = {}  # keys looked up before (mentions repeat); bounded

    @classmethod
    def build(cls, entities: Sequence[Entity]) -> "NameIndex":
        names: Dict[str, List[int]] = defaultdict(list)
        for row, entity in enumerate(entities):
            for name in {normalize(n) for n in (entity.name, *entity.aliases)}:
                if name:
                    names[name].append(row)
        return cls.of(names)

    @classmethod
    def of(cls, names: Dict[str, List[int]]) -> "NameIndex":
        """From ``{key: [row, ...]}``."""
        keys = sorted(names)
        sizes = np.array([len(names[k]) for k in keys], dtype=np.int64)
        ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        rows = np.fromiter((r for k in keys for r in names[k]), dtype=np.int32, count=int(ptr[-1]))
        return cls(StringColumn.of(keys), ptr, rows)

    def compact(self) -> "NameIndex":
        """The keys with a digit and a space by their :func:`compact_key` (their rows merged, sorted)."""
        merged: Dict[str, set] = defaultdict(set)
        for i, key in enumerate(self.keys):
            compact = compact_key(key) if " " in key else None
            if compact:
                merged[compact].update(self.rows[self.ptr[i] : self.ptr[i + 1]].tolist())
        return NameIndex.of({k: sorted(v) for k, v in merged.items()})

    def get(self, key: str) -> Optional[List[int]]:
        """The rows of entities with this normalised name, or None."""
        if key not in self._seen:
            if len(self._seen) >= LOOKUP_CACHE:
                self._seen.clear()
            i = _find(self.keys, key)
            self._seen[key] = None if i is None else tuple(self.rows[self.ptr[i] : self.ptr[i + 1]].tolist())
        found = self._seen[key]
        return None if found is None else list(found)

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return len(self.keys)

    def write(self, folder: Path, prefix: str = "") -> None:
        self.keys.write(folder, prefix + NAME_KEYS)
        np.save(folder / (prefix + NAME_PTR), self.ptr, allow_pickle=False)
        np.save(folder / (prefix + NAME_ROWS), self.rows, allow_pickle=False)

    @classmethod
    def exists(cls, folder: Path, prefix: str = "") -> bool:
        return all((folder / (prefix + name)).exists() for name in (f"{NAME_KEYS}.bin", NAME_PTR, NAME_ROWS))

    @classmethod
    def read(cls, folder: Path, prefix: str = "") -> "NameIndex":
        keys = StringColumn.read(folder, prefix + NAME_KEYS)
        return cls(keys, np.load(folder / (prefix + NAME_PTR), allow_pickle=False),
                   np.load(folder / (prefix + NAME_ROWS), allow_pickle=False))


class TypeColumn(Sequence[List[str]]):
    """Each entity's types as a row of a small table of distinct type lists (2.4M entities share a few)."""

    def __init__(self, sets: Optional[List[List[str]]] = None, of: Optional[np.ndarray] = None):
        self.sets: List[List[str]] = sets or []
        self.of = np.zeros(0, np.int32) if of is None else of
        self._where = {tuple(t): i for i, t in enumerate(self.sets)}

    def __getitem__(self, row):
        return self.sets[self.of[row]]

    def __len__(self) -> int:
        return len(self.of)

    def rows_with_any(self, types: Iterable[str]) -> np.ndarray:
        """The rows of the entities that have at least one of ``types``, in order."""
        wanted = set(types)
        sets = [i for i, s in enumerate(self.sets) if wanted.intersection(s)]
        return np.flatnonzero(np.isin(self.of, sets))

    def rows_typed_like(self, row: int) -> np.ndarray:
        """The rows of the entities whose types are exactly ``row``'s, in order."""
        return np.flatnonzero(self.of == self.of[row])

    def extend(self, types: Sequence[Sequence[str]]) -> None:
        new = [self._where.setdefault(tuple(t), len(self._where)) for t in types]
        self.sets.extend([list(t) for t in list(self._where)[len(self.sets) :]])
        self.of = np.concatenate([self.of, np.asarray(new, dtype=np.int32)])


class _Sorted(Sequence[str]):
    def __init__(self, ids: StringColumn, order: np.ndarray):
        self.ids, self.order = ids, order

    def __getitem__(self, k):
        return self.ids[int(self.order[k])]

    def __len__(self) -> int:
        return len(self.order)


class IdRows(Mapping[str, int]):
    """Entity id → row without a Python dict (~120 MB for 2.4M ids): bisection over the rows sorted by
    id; ids added later (``update``) are kept in a small dict."""

    def __init__(self, ids: StringColumn, order: np.ndarray):
        self._sorted = _Sorted(ids, order)
        self._added: Dict[str, int] = {}

    def get(self, key, default=None):
        if not isinstance(key, str):
            return default
        if key in self._added:
            return self._added[key]
        i = _find(self._sorted, key)
        return default if i is None else int(self._sorted.order[i])

    def __getitem__(self, key) -> int:
        row = self.get(key)
        if row is None:
            raise KeyError(key)
        return row

    def __contains__(self, key) -> bool:
        return self.get(key) is not None

    def __iter__(self) -> Iterator[str]:
        yield from (self._sorted.ids[int(r)] for r in self._sorted.order)
        yield from self._added

    def __len__(self) -> int:
        return len(self._sorted) + len(self._added)

    def update(self, more: Dict[str, int]) -> None:
        self._added.update(more)


class EntityTable(Sequence[Entity]):
    """Entities in index order. ``ids``, ``names`` and ``types`` are compact columns; ``table[i]`` is the
    whole :class:`~spacy_pel.kb.Entity`, parsed from its line of ``entities.jsonl`` when the table
    was read from disk (entities added later are held in memory)."""

    def __init__(self, entities: Sequence[Entity] = ()):
        self.ids = StringColumn()
        self._order: Optional[np.ndarray] = None  # rows by sorted id (read with the table, or made on first use)
        self.names = StringColumn()
        self.types = TypeColumn()
        self.alt_ids: Dict[str, int] = {}  # an entity's alternative ids (extra["alt_ids"]) → its row
        self._offsets: Optional[np.ndarray] = None
        self._records: Optional[OpenedFile] = None  # entities.jsonl, opened: readable once the folder is gone
        self._added: List[Entity] = []
        self._names: Optional[NameIndex] = None
        self._compact: Optional[NameIndex] = None
        self.extend(entities)

    # ------------------------------------------------------------------ reading
    @overload
    def __getitem__(self, i: int) -> Entity: ...

    @overload
    def __getitem__(self, i: slice) -> List[Entity]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"entity row {i} out of range (the KB has {len(self)})")
        on_file = 0 if self._offsets is None else len(self._offsets) - 1
        if i >= on_file:
            return self._added[i - on_file]
        line = self._records.read_range(self._offsets[i], self._offsets[i + 1])
        return Entity.from_dict(json.loads(line))

    def __iter__(self) -> Iterator[Entity]:
        return (self[i] for i in range(len(self)))

    def __len__(self) -> int:
        return len(self.ids)

    def id_order(self) -> np.ndarray:
        """The rows sorted by their ids (for :class:`IdRows`)."""
        if self._order is None:
            self._order = np.array(sorted(range(len(self.ids)), key=self.ids.__getitem__), dtype=np.int64)
        return self._order

    def id_rows(self) -> "IdRows":
        return IdRows(self.ids, self.id_order())

    def primary_ids(self) -> Callable[[str], Optional[str]]:
        """id or alternative id → the primary id of the entity it names (None: not in the table)."""
        rows = self.id_rows()

        def primary(entity_id: str) -> Optional[str]:
            row = rows.get(entity_id)
            row = self.alt_ids.get(entity_id) if row is None else row
            return None if row is None else self.ids[row]

        return primary

    def name_index(self) -> NameIndex:
        """Normalised names and synonyms → rows (read with the table, or built on first use)."""
        if self._names is None:
            self._names = NameIndex.build(self)
        return self._names

    def compact_index(self) -> NameIndex:
        """Space-free forms of the names with digits → rows (:func:`compact_key`; read with the table,
        or built from :meth:`name_index` on first use)."""
        if self._compact is None:
            self._compact = self.name_index().compact()
        return self._compact

    # ------------------------------------------------------------------ changing
    def extend(self, entities: Sequence[Entity]) -> None:
        entities = list(entities)
        for row, entity in enumerate(entities, len(self.ids)):
            for alt in entity.extra.get("alt_ids") or []:
                self.alt_ids.setdefault(str(alt), row)
        self._added.extend(entities)
        self.ids.extend([e.id for e in entities])
        self._order = None
        self.names.extend([e.name for e in entities])
        self.types.extend([e.types for e in entities])
        self._names = self._compact = None

    # ------------------------------------------------------------------ disk
    def write(self, folder: Path) -> None:
        """Write ``entities.jsonl`` and the column files into ``folder`` (a fresh directory)."""
        target = folder / RECORDS
        if self._records is not None and not self._added:
            self._records.copy_to(target)  # the records as read, byte for byte: their offsets too
            offsets = self._offsets
        else:
            write_jsonl(self, target)
            with target.open("rb") as f:
                lengths = [len(line) for line in f]
            offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
        if len(offsets) != len(self) + 1:
            raise ValueError(f"{target}: {len(offsets) - 1} lines written for {len(self)} entities")
        np.save(folder / OFFSETS, offsets, allow_pickle=False)
        columns = {"type_sets": self.types.sets, "alt_ids": self.alt_ids}
        self.ids.write(folder, IDS)
        np.save(folder / ID_ORDER, self.id_order(), allow_pickle=False)
        self.names.write(folder, NAMES)
        np.save(folder / TYPES, self.types.of, allow_pickle=False)
        (folder / COLUMNS).write_text(json.dumps(columns, ensure_ascii=False), encoding="utf8")
        self.name_index().write(folder)
        self.compact_index().write(folder, COMPACT)

    @classmethod
    def read(cls, folder: PathLike) -> "EntityTable":
        folder = Path(folder)
        if not all((folder / name).exists() for name in (COLUMNS, TYPES, OFFSETS, f"{IDS}.bin", ID_ORDER, f"{NAMES}.bin")) \
                or not NameIndex.exists(folder):
            with (folder / RECORDS).open(encoding="utf8") as f:  # a folder written before the columns
                return cls([Entity.from_dict(json.loads(line)) for line in f])
        table = cls()
        columns = json.loads((folder / COLUMNS).read_text(encoding="utf8"))
        table.ids, table.names = StringColumn.read(folder, IDS), StringColumn.read(folder, NAMES)
        table._order = np.load(folder / ID_ORDER, allow_pickle=False)
        table.types = TypeColumn(columns["type_sets"], np.load(folder / TYPES, allow_pickle=False))
        table.alt_ids = columns.get("alt_ids", {})
        table._offsets = np.load(folder / OFFSETS, allow_pickle=False)
        table._names = NameIndex.read(folder)
        if NameIndex.exists(folder, COMPACT):
            table._compact = NameIndex.read(folder, COMPACT)
        size = (folder / RECORDS).stat().st_size
        sizes = {len(table.ids), len(table.names), len(table.types), len(table._offsets) - 1}
        if len(sizes) != 1 or table._offsets[-1] != size:
            raise ValueError(f"{folder}: {COLUMNS}, {OFFSETS} and {RECORDS} disagree; rebuild the KB")
        if size:  # opened now: the records stay readable if the folder goes (a pipeline read from bytes)
            table._records = OpenedFile(folder / RECORDS)
        return table

