"""The entity index: entity table + FAISS index of entity vectors, on disk and in memory.

A KB folder holds::

    meta.json        counts, dimension, metric, index kind, the entity encoder's fingerprint
    entities.jsonl   the entity records, in index order (+ the column files of :mod:`.table`)
    embeddings.npy   the entity vectors (float16, the rows the index holds)
    index.faiss      the FAISS index, for the approximate kinds (HNSW, ...); a ``flat`` KB is
                     searched exactly from embeddings.npy (:mod:`.search`)

Folders are written whole into a temporary sibling and renamed into place, so a reader never sees
a half-written KB. Rewriting a KB folder keeps the name indexes inside it (``build-names``' default
``KB/names``) when the new KB gives them the same rows, and else moves them beside it, with a warning
(:class:`KeptNames`): they are never deleted.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from collections import ChainMap
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import faiss
import numpy as np

from ..files import InputError, atomic_dir, link_or_copy
from ..kb import Entity
from ..models.encoder import BiEncoder, EncoderMismatchError, mismatch_reason
from .digests import name_inputs_digest
from .encoder_record import encoder_beside, recorded_encoder, relative_record
from .search import NPROBE, REFINE, FlatSearch, InMemoryVectors, RefinedSearch, SubsetSearch, VectorFile
from .table import EntityTable

PathLike = Union[str, Path]
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # 1: flat KBs with an index.faiss of float32 vectors, no column files
INDEX_KINDS = ("flat", "hnsw", "ivfpq")
MIN_IVFPQ = 10_000  # entities: PQ's codebooks need that many to train; below it flat is small and exact
log = logging.getLogger(__name__)


def make_faiss_index(dim: int, kind: str = "hnsw", hnsw_m: int = 32) -> faiss.Index:
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 80
        index.hnsw.efSearch = 128
        return index
    raise ValueError(f"index kind must be one of {INDEX_KINDS}, not {kind!r}")


def make_ivfpq(vectors: np.ndarray, seed: int = 0) -> faiss.Index:
    """IVF with ~4·√n lists over product-quantised vectors (d/4 bytes an entity), trained on a sample."""
    n, d = vectors.shape
    if n < MIN_IVFPQ:
        raise InputError(f"an ivfpq index needs at least {MIN_IVFPQ:,} entities (this KB has {n:,}); use flat")
    nlist = int(min(65536, 2 ** round(np.log2(4 * np.sqrt(n)))))
    m = next(m for m in (d // 4, d // 8, d // 2, d) if m >= 1 and d % m == 0)
    index = faiss.index_factory(d, f"IVF{nlist},PQ{m}", faiss.METRIC_INNER_PRODUCT)
    sample = np.random.default_rng(seed).choice(n, min(n, max(64 * nlist, 100_000)), replace=False)
    index.train(np.ascontiguousarray(vectors[np.sort(sample)], dtype=np.float32))
    for start in range(0, n, 100_000):
        index.add(np.ascontiguousarray(vectors[start : start + 100_000], dtype=np.float32))
    return index


class IncompleteKBError(InputError):
    """A KB folder with its meta.json but without a file a KB needs (an interrupted copy, a deleted file),
    or with a file that cannot be read (truncated, overwritten)."""


def is_name_index(folder: Path) -> bool:
    """True for a name index folder (``build-names``): its meta.json records the ids of its KB."""
    try:
        meta = json.loads((Path(folder) / "meta.json").read_text(encoding="utf8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "kb_ids_sha256" in meta


class KeptNames:
    """The name indexes inside a KB folder about to be rewritten (``build-names``' default ``KB/names``):
    linked into the new folder (:meth:`carry`) when the new KB gives them the same rows — the same entity
    encoder, ids, names, synonyms and types, in the same order (an unchanged KB built again) — else moved
    beside it as ``KB.NAME.old`` with a warning (:meth:`set_aside`: after ``--add``, another KB or encoder)."""

    def __init__(self, folder: PathLike, fingerprint: str, entities: Sequence[Entity]):
        self.folder = Path(folder)
        self.found = sorted(p for p in self.folder.iterdir() if is_name_index(p)) if self.folder.is_dir() else []
        self.same = bool(self.found) and self._same(fingerprint, entities)
        self.kept: List[str] = []
        self.to_move: List[str] = []
        self.aside: Dict[str, str] = {}

    def _same(self, fingerprint: str, entities: Sequence[Entity]) -> bool:
        try:
            meta, old = EntityIndex.read_meta(self.folder), EntityTable.read(self.folder)
        except (OSError, ValueError):
            return False
        return (meta.get("encoder_fingerprint") == fingerprint and len(old) == len(entities)
                and name_inputs_digest(old) == name_inputs_digest(entities))

    def carry(self, tmp: Path) -> None:
        """Link the name indexes that still hold into the new KB folder ``tmp``."""
        for sub in self.found:
            if self.same and not (tmp / sub.name).exists():
                shutil.copytree(sub, tmp / sub.name, copy_function=link_or_copy)
                self.kept.append(sub.name)
                log.info("kept the name index %s: the KB gives it the same rows", sub)
            else:
                self.to_move.append(sub.name)

    def set_aside(self, old: Path) -> None:
        """Move the others out of the old KB folder ``old`` (renamed aside) before it is removed."""
        for name in self.to_move:
            dest, n = self.folder.with_name(f"{self.folder.name}.{name}.old"), 1
            while dest.exists() or dest.is_symlink():
                n += 1
                dest = self.folder.with_name(f"{self.folder.name}.{name}.old{n}")
            os.replace(old / name, dest)
            self.aside[name] = str(dest)
            log.warning("the name index %s holds the name rows of the KB before this build, not of the new one: moved "
                        "to %s (python -m spacy_pel build-names %s --output %s --reuse %s, with its --input and "
                        "--max-length, encodes only the names it lacks if the entity encoder is the same)",
                        self.folder / name, dest, self.folder, self.folder / name, dest)

    def report(self) -> Dict[str, object]:
        """What became of the name indexes: ``{"kept": [...], "set_aside": {name: where}}`` (empty: none)."""
        return {k: v for k, v in (("kept", self.kept), ("set_aside", self.aside)) if v}


class EntityIndex:
    """Entity ids, names and vectors with a search index over them: exact (``flat``, torch) or
    approximate (FAISS). ``precision`` is the flat search's: bf16 where the CPU has bf16 units."""

    def __init__(
        self,
        entities: Sequence[Entity],
        embeddings: np.ndarray,
        *,
        metric: str,
        fingerprint: str,
        encoder_source: str = "",
        kind: str = "flat",
        searcher=None,
        precision: str = "auto",
        rows_from=None,
        entity_settings: Optional[Mapping[str, object]] = None,
        name_inputs: Optional[str] = None,
    ):
        if embeddings.ndim != 2 or len(entities) != len(embeddings):
            raise ValueError(f"{len(entities)} entities but vectors of shape {embeddings.shape}")
        if kind not in INDEX_KINDS:
            raise ValueError(f"index kind must be one of {INDEX_KINDS}, not {kind!r}")
        self.entities = entities if isinstance(entities, EntityTable) else EntityTable(entities)
        # float16: what is saved, and what training and --add read (memory-mapped when loaded)
        self.embeddings = np.asarray(embeddings, dtype=np.float16)
        # where :meth:`vectors` reads rows: the saved file (``os.pread``, so the rows read stay in the OS
        # page cache rather than in this process's memory, as memory-mapped pages would), else the array
        self.rows_from = rows_from if rows_from is not None else InMemoryVectors(self.embeddings)
        self.metric, self.fingerprint, self.encoder_source, self.kind = metric, fingerprint, encoder_source, kind
        self.entity_settings = dict(entity_settings or {})  # the encoder's entity-side settings (empty: not recorded)
        # name_inputs_digest of the entities: recorded by the name indexes built from it (None: not known)
        self.name_inputs = name_inputs
        self.row = self.entities.id_rows()  # id → row (a Mapping; primary ids only)
        if searcher is None and kind == "flat":
            searcher = FlatSearch.from_array(embeddings, precision)
        elif searcher is None and kind == "ivfpq":
            searcher = RefinedSearch(make_ivfpq(embeddings), InMemoryVectors(self.embeddings))
        elif searcher is None:
            searcher = make_faiss_index(self.embeddings.shape[1], kind)
            if len(self.embeddings):
                searcher.add(np.ascontiguousarray(embeddings, dtype=np.float32))
        self.searcher = searcher

    def set_search_precision(self, precision: str) -> None:
        """Search the flat index in ``precision`` from now on (other kinds have none)."""
        if self.kind == "flat":
            self.searcher = FlatSearch.from_array(np.asarray(self.embeddings), precision)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        entities: Sequence[Entity],
        encoder: BiEncoder,
        *,
        kind: str = "flat",
        encoder_source: str = "",
        batch_size: int = 128,
        progress: bool = False,
    ) -> "EntityIndex":
        vectors = encoder.encode_entities(entities, batch_size=batch_size, progress=progress)
        return cls(
            entities,
            vectors,
            metric=encoder.config.similarity,
            fingerprint=encoder.fingerprint(),
            encoder_source=encoder_source or encoder.config.base,
            kind=kind,
            entity_settings=encoder.entity_settings(),
            name_inputs=name_inputs_digest(entities),
        )

    def check_encoder(self, encoder: BiEncoder) -> None:
        """Refuse an encoder whose entity side differs from the one that built this KB."""
        fingerprint = encoder.fingerprint()
        if fingerprint != self.fingerprint:
            raise EncoderMismatchError(
                f"this KB was built with entity encoder {self.fingerprint} ({self.encoder_source or 'unknown'}), "
                f"but the encoder given has fingerprint {fingerprint}: {mismatch_reason(self.entity_settings, encoder)}. "
                "Rebuild the KB with this encoder (python -m spacy_pel.build_kb) or use the encoder that built it."
            )

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """float32 vectors of the KB rows ``rows`` (any shape; every row valid): ``rows.shape + (dim,)``."""
        rows = np.asarray(rows, dtype=np.int64)
        return self.rows_from.rows(rows.ravel()).reshape(*rows.shape, self.embeddings.shape[1])

    def add(self, entities: Sequence[Entity], encoder: BiEncoder, batch_size: int = 128, progress: bool = False):
        """Append new entities, encoding only them (the existing vectors are kept as they are)."""
        self.check_encoder(encoder)
        clash = [e.id for e in entities if e.id in self.lookup]  # an alternative id too: a corpus's id would change meaning
        seen = set()
        clash += [e.id for e in entities if e.id in seen or seen.add(e.id)]
        if clash:
            raise ValueError(f"{len(clash)} entity id(s) already in the KB, e.g. {clash[:5]}")
        vectors = encoder.encode_entities(entities, batch_size=batch_size, progress=progress)
        start = len(self.entities)
        self.entities.extend(entities)
        self.row.update({e.id: start + i for i, e in enumerate(entities)})
        self.embeddings = np.concatenate([self.embeddings, vectors.astype(np.float16)])
        self.rows_from = InMemoryVectors(self.embeddings)
        self.searcher.add(np.ascontiguousarray(vectors, dtype=np.float32))
        self.name_inputs = name_inputs_digest(self.entities)

    def subset(self, rows: Sequence[int]) -> "EntityIndex":
        """A KB of only these rows (same encoder, the saved vectors, nothing re-encoded)."""
        rows = np.asarray(rows, dtype=np.int64)
        vectors = np.asarray(self.embeddings[rows], dtype=np.float32)
        entities = [self.entities[i] for i in rows]
        return EntityIndex(
            entities,
            vectors,
            metric=self.metric,
            fingerprint=self.fingerprint,
            encoder_source=self.encoder_source,
            kind=self.kind,
            entity_settings=self.entity_settings,
            name_inputs=name_inputs_digest(entities),
        )

    # ------------------------------------------------------------------ searching
    def search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, rows) per query; rows are -1 where the KB has fewer than k entities."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if len(queries) == 0 or len(self.entities) == 0:
            return np.zeros((len(queries), k), np.float32), np.full((len(queries), k), -1, np.int64)
        return self.searcher.search(queries, min(k, len(self.entities)))

    def among(self, rows: np.ndarray) -> SubsetSearch:
        """Exact search among ``rows`` only, answered in this KB's row numbers: a copy of those rows of the
        flat search's matrix, or, for an approximate KB (``hnsw``, ``ivfpq``), their saved vectors read once."""
        if isinstance(self.searcher, FlatSearch):
            return self.searcher.subset(rows)
        return SubsetSearch(FlatSearch.from_array(self.vectors(rows)), rows)

    def search_each(self, queries: np.ndarray, k: int, within: Sequence[Optional[SubsetSearch]]) -> Tuple[np.ndarray, np.ndarray]:
        """:meth:`search` with each query searched by its ``within`` searcher (None: the whole KB)."""
        scores, rows = np.zeros((len(queries), k), np.float32), np.full((len(queries), k), -1, np.int64)
        groups: Dict[int, Tuple[Optional[SubsetSearch], List[int]]] = {}
        for i, searcher in enumerate(within):
            groups.setdefault(id(searcher), (searcher, []))[1].append(i)
        for searcher, members in groups.values():
            part = np.ascontiguousarray(queries[members], dtype=np.float32)
            found_scores, found_rows = self.search(part, k) if searcher is None else searcher.search(part, k)
            scores[members, : found_rows.shape[1]], rows[members, : found_rows.shape[1]] = found_scores, found_rows
        return scores, rows

    def __len__(self) -> int:
        return len(self.entities)

    @property
    def lookup(self) -> Mapping[str, int]:
        """Entity id or alternative id → row (``row`` holds the primary ids only)."""
        return ChainMap(self.row, self.entities.alt_ids)

    def resolve(self, entity_id: str) -> Optional[int]:
        """The row of the entity with this id or alternative id (MEDIC's AltDiseaseIDs, OBO alt_id), or None."""
        row = self.row.get(entity_id)
        return self.entities.alt_ids.get(entity_id) if row is None else row

    def canonical(self, entity_id: str) -> str:
        """The primary id of the entity ``entity_id`` names (itself when the KB does not know it)."""
        row = self.resolve(entity_id)
        return entity_id if row is None else self.entities.ids[row]

    # ------------------------------------------------------------------ disk
    def meta(self) -> dict:
        return {
            "format_version": FORMAT_VERSION,
            "entities": len(self.entities),
            "dim": int(self.embeddings.shape[1]),
            "metric": self.metric,
            "index": self.kind,
            "encoder_fingerprint": self.fingerprint,
            "encoder_source": self.encoder_source,
            **({"encoder_entity_settings": self.entity_settings} if self.entity_settings else {}),
            **({"name_inputs_sha256": self.name_inputs} if self.name_inputs else {}),
            **({"nprobe": self.searcher.nprobe, "refine": self.searcher.refine} if self.kind == "ivfpq" else {}),
        }

    def to_disk(self, path: PathLike, extra: Optional[Callable[[Path], None]] = None,
                encoder_folder: Optional[PathLike] = None) -> Dict[str, object]:
        """Write the KB folder ``path`` (atomically; ``extra(folder)`` adds the files that must land with it in the
        one rename: build_kb's stamp and report); the name indexes in the folder it replaces are kept or set
        aside (:class:`KeptNames`, whose report is returned). ``encoder_folder``: an encoder saved beside it
        (a pipeline's ``encoder/``), recorded instead of the one it was built with (:func:`encoder_beside`)."""
        names = KeptNames(path, self.fingerprint, self.entities)
        with atomic_dir(path, on_old=names.set_aside) as tmp:
            self.entities.write(tmp)
            np.save(tmp / "embeddings.npy", self.embeddings, allow_pickle=False)
            if self.kind != "flat":
                faiss.write_index(getattr(self.searcher, "index", self.searcher), str(tmp / "index.faiss"))
            meta = {**self.meta(), **(relative_record(self.encoder_source, path) if encoder_folder is None
                                      else encoder_beside(self.encoder_source, encoder_folder, path))}
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2), encoding="utf8")
            names.carry(tmp)
            if extra is not None:
                extra(tmp)
        return names.report()

    @classmethod
    def from_disk(cls, path: PathLike, precision: str = "auto") -> "EntityIndex":
        path = Path(path)
        meta = cls.read_meta(path)
        try:
            return cls._read(path, meta, precision)
        except FileNotFoundError as err:
            missing = Path(err.filename).name if err.filename else str(err)
            raise IncompleteKBError(f"KB folder {path} is incomplete: {missing} is missing; rebuild it with build_kb") from None
        except (ValueError, EOFError, RuntimeError) as err:  # a truncated or overwritten file (FAISS: RuntimeError)
            if isinstance(err, InputError):
                raise
            reason = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
            reason = reason.removeprefix(f"{path}: ").split("; rebuild")[0]
            raise IncompleteKBError(f"KB folder {path} is damaged: {reason[:300]}; rebuild it with build_kb") from None

    @staticmethod
    def read_meta(path: PathLike) -> dict:
        """A KB folder's ``meta.json`` (entity count, encoder fingerprint and source, index kind), checked."""
        path = Path(path)
        if not (path / "meta.json").exists():
            raise FileNotFoundError(f"{path} is not a spacy_pel KB folder (no meta.json); build one with build_kb")
        try:
            meta = json.loads((path / "meta.json").read_text(encoding="utf8"))
        except ValueError as err:  # not JSON, or not UTF-8
            raise IncompleteKBError(f"KB folder {path} is damaged: meta.json is not readable JSON ({err})") from None
        if not isinstance(meta, dict):
            raise IncompleteKBError(f"KB folder {path} is damaged: meta.json is not a JSON object")
        if "kb_ids_sha256" in meta:
            raise InputError(f"{path} is a name index (build-names' output), not a KB folder (build-kb's)")
        if meta.get("format_version") not in READABLE_VERSIONS:
            raise InputError(f"{path}: KB format version {meta.get('format_version')} is not one of {READABLE_VERSIONS}")
        return meta

    @classmethod
    def _read(cls, path: Path, meta: dict, precision: str) -> "EntityIndex":
        entities = EntityTable.read(path)
        try:  # memory-mapped: only the rows read (training, subsets) are paged in; the rules read rows with pread
            embeddings = np.load(path / "embeddings.npy", allow_pickle=False, mmap_mode="r")
        except (ValueError, EOFError) as err:
            raise ValueError(f"embeddings.npy is not a readable array ({str(err).split('. ')[0]})") from None
        if embeddings.ndim != 2 or embeddings.shape[1] != meta.get("dim", embeddings.shape[-1]):
            raise ValueError(f"embeddings.npy holds an array of shape {embeddings.shape}, not vectors of {meta.get('dim')} dimensions")
        kind = meta.get("index", "flat")
        if kind == "flat":  # exact search from the saved vectors (a version-1 index.faiss is not read)
            index = FlatSearch.from_npy(path / "embeddings.npy", precision)
        elif kind == "ivfpq":  # candidates from the codes in memory, rescored from the vectors on disk
            index = RefinedSearch(faiss.read_index(str(path / "index.faiss")), VectorFile(path / "embeddings.npy"),
                                  meta.get("nprobe", NPROBE), meta.get("refine", REFINE))
        else:
            index = faiss.read_index(str(path / "index.faiss"))
        if index.ntotal != len(entities) or meta["entities"] != len(entities) or len(embeddings) != len(entities):
            raise IncompleteKBError(f"{path}: meta.json, the entity table and the vectors disagree on the entity count")
        return cls(
            entities,
            embeddings,
            metric=meta["metric"],
            fingerprint=meta["encoder_fingerprint"],
            encoder_source=recorded_encoder(meta, path),
            kind=kind,
            searcher=index,
            rows_from=VectorFile(path / "embeddings.npy"),
            entity_settings=meta.get("encoder_entity_settings"),
            name_inputs=meta.get("name_inputs_sha256"),
        )
