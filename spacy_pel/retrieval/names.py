"""Name-level retrieval: every name and synonym of every entity as its own vector; an entity scores by
its best name (SapBERT's way of indexing a KB).

A KB row is one vector of ``[CLS] name [SEP] types [SEP] synonyms [SEP]``; a name row is one of the
entity's names alone — ``[CLS] name [SEP]`` (``input="name"``) or ``[CLS] name [SEP] types [SEP]``
(``input="name_types"``) — encoded by the same (entity) tower in at most ``max_length`` word pieces.
Names are distinct per entity after :func:`~spacy_pel.kb.normalize` (case and punctuation runs); the
first spelling is the one encoded. A name index folder (by default ``KB_DIR/names/``) holds::

    meta.json         counts, input kind, max length, the entity encoder's fingerprint, the KB ids' hash
    embeddings.npy    the name vectors (float16, one row per name)
    entity_rows.npy   the KB row of each name (int32)
    names.json        the names, in row order

:meth:`NameIndex.search` returns the top-k entities, each once, scored by their best name (it fetches
name rows until k distinct entities are found). Building encodes in chunks kept in a work folder
(:func:`~.build.encode_resumable`), so an interrupted build resumes; a work folder made from other
names, another encoder, input kind, length or precision is discarded.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..files import InputError, atomic_dir, atomic_write, check_output_folder, output_lock
from ..kb import Entity, normalize
from ..models.encoder import BiEncoder, EncoderMismatchError
from .build import load_encoder
from .chunks import PieceTower, encode_resumable
from .digests import ids_digest
from .index import EntityIndex, is_name_index
from .kb_lock import kb_lock
from .ray_build import encode_on_ray
from .reuse import earlier_names, encode_reusing
from .search import FlatSearch, OpenedFile, VectorFile

PathLike = Union[str, Path]
NAMES_DIR = "names"
META, VECTORS, ROWS, TEXTS = "meta.json", "embeddings.npy", "entity_rows.npy", "names.json"
INPUTS = ("name", "name_types")
MAX_LENGTH = 24
NAME_BATCH_TOKENS = 512  # encode_names: padded pieces a batch at most
FORMAT_VERSION = 1
FETCH = 4  # name rows fetched per entity wanted, at first (doubled for queries still short of k)
PAIRS_PER_CALL = 1 << 20  # (query, name) products computed at once when scoring given entities


def entity_names(entity: Entity) -> List[str]:
    """The entity's name and synonyms, distinct after :func:`normalize` (first spelling kept)."""
    seen, out = set(), []
    for name in (entity.name, *entity.aliases):
        key = normalize(name)
        if key and key not in seen:
            seen.add(key)
            out.append(name)
    return out


def name_inputs(encoder: BiEncoder, names: Sequence[str], types: Sequence[str], input: str, max_length: int) -> List[List[int]]:
    """Word-piece ids of ``[CLS] name [SEP]`` (``input="name"``) or ``[CLS] name [SEP] types [SEP]``."""
    if input not in INPUTS:
        raise ValueError(f"name input must be one of {', '.join(INPUTS)}, not {input!r}")
    if max_length < 4:
        raise ValueError(f"max_length must be at least 4 word pieces, not {max_length}")
    tok = encoder.tokenizer
    budget = max_length - (2 if input == "name" else 3)
    out: List[List[int]] = []
    for start in range(0, len(names), 4096):
        pieces = tok(list(names[start : start + 4096]), add_special_tokens=False, truncation=True, max_length=budget)["input_ids"]
        if input == "name":
            out.extend([tok.cls_token_id, *p, tok.sep_token_id] for p in pieces)
            continue
        kinds = tok(list(types[start : start + 4096]), add_special_tokens=False, truncation=True, max_length=budget)["input_ids"]
        for p, t in zip(pieces, kinds):
            t = t[: budget - len(p)]
            out.append([tok.cls_token_id, *p, tok.sep_token_id, *t, tok.sep_token_id])
    return out


def encode_names(encoder: BiEncoder, names: Sequence[str], max_length: int = MAX_LENGTH, batch_size: int = 256,
                 max_tokens: int = NAME_BATCH_TOKENS) -> np.ndarray:
    """``[n, dim]`` entity-tower vectors of ``[CLS] name [SEP]`` inputs (``input="name"``); identical
    inputs are encoded once (a batch's mention texts repeat), as :meth:`BiEncoder.encode_mentions` does.
    Batches hold at most ``max_tokens`` padded pieces: a few hundred texts (a pipeline batch's open
    mentions) have a long tail that would pad the others ~2× at 256 a batch."""
    seqs = name_inputs(encoder, names, [""] * len(names), "name", max_length)
    where: Dict[tuple, int] = {}
    slot = [where.setdefault(tuple(s), len(where)) for s in seqs]
    return PieceTower(encoder).encode_entities([list(s) for s in where], batch_size, max_tokens=max_tokens)[slot]


class NameIndex:
    """Name vectors with the KB row of each; search returns entities (each once) by their best name."""

    def __init__(self, vectors, entity_rows: np.ndarray, names: Union[Sequence[str], Path], *, entities: int, ids_sha256: str,
                 fingerprint: str, input: str = "name", max_length: int = MAX_LENGTH, precision: str = "auto",
                 searcher: Optional[FlatSearch] = None, file: Optional[VectorFile] = None,
                 saved: Optional[OpenedFile] = None, kb_names_sha256: Optional[str] = None):
        entity_rows = np.asarray(entity_rows, dtype=np.int32)
        # the names themselves, or the path of their JSON file, read when first wanted (scoring needs none)
        self._names: Optional[List[str]] = None if isinstance(names, Path) else list(names)
        # opened now: readable (and copied by to_disk) even once the folder is gone (a pipeline read from bytes)
        self._names_file = OpenedFile(names) if isinstance(names, Path) else None
        count = len(self._names) if self._names is not None else len(entity_rows)
        if len(entity_rows) != count or (searcher is None and file is None and len(vectors) != count):
            raise ValueError(f"{count} names but {len(entity_rows)} entity rows / vectors")
        if len(entity_rows) and not 0 <= entity_rows.min() <= entity_rows.max() < entities:
            raise ValueError(f"name rows point outside the KB's {entities} entities")
        self.entity_rows, self.entities = entity_rows, entities
        self.ids_sha256, self.fingerprint, self.input, self.max_length = ids_sha256, fingerprint, input, max_length
        self.kb_names_sha256 = kb_names_sha256  # the KB's name_inputs_digest when built (None: not recorded)
        # the vectors in memory (searchable), or on disk, read as rows are scored (``from_disk(in_memory=False)``)
        self.file = file
        self.saved = saved  # the vectors file held in memory was read from: to_disk copies it, not a rounded copy
        self.searcher = None if file is not None else searcher or FlatSearch.from_array(np.asarray(vectors, np.float32), precision)
        # each entity's name rows: by_entity[ptr[r]:ptr[r + 1]]
        self.by_entity = np.argsort(entity_rows, kind="stable")
        self.ptr = np.searchsorted(entity_rows[self.by_entity], np.arange(entities + 1)).astype(np.int64)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, entities: Sequence[Entity], encoder: BiEncoder, *, input: str = "name", max_length: int = MAX_LENGTH,
              work: Optional[Path] = None, batch_size: int = 256, progress: bool = False,
              chunk_size: Optional[int] = None, ray=None, source: str = "",
              reuse: Optional[PathLike] = None) -> Tuple["NameIndex", dict]:
        """Encode every entity's names (see the module doc); ``work``: a folder for resumable chunks
        (none: encoded in memory); ``ray``: :class:`.ray_build.RayOptions` to encode them on Ray, each
        actor loading the encoder ``source``; ``reuse``: an earlier name index whose vectors the names it
        holds take (:mod:`.reuse`). Returns the index and what was resumed (and reused)."""
        names, rows, types = [], [], []
        for row, entity in enumerate(entities):
            for name in entity_names(entity):
                names.append(name)
                rows.append(row)
                types.append(" ; ".join(entity.types))
        fingerprint = encoder.fingerprint()
        tower = PieceTower(encoder)

        def encode(todo):  # the (name, types) to encode: all, or those the earlier index lacks
            todo = name_inputs(encoder, [n for n, _ in todo], [t for _, t in todo], input, max_length)
            if work is None:
                return tower.encode_entities(todo, batch_size, progress), {}
            digest = hashlib.sha256(json.dumps(todo).encode()).hexdigest()
            stamp = {"names": len(todo), "names_sha256": digest, "encoder_fingerprint": fingerprint, "input": input,
                     "max_length": max_length, "precision": encoder.resolved_precision,
                     "device": encoder.device_.type}
            if ray is None:
                return encode_resumable(todo, tower, stamp, Path(work), batch_size, progress, chunk_size, "names")
            return encode_on_ray(todo, "pieces", source, encoder, stamp, Path(work), batch_size, progress, chunk_size, ray)

        earlier = None if reuse is None else earlier_names(
            reuse, names, encoder, input, max_length, cls.from_disk(reuse, in_memory=False))
        vectors, resume = encode_reusing(list(zip(names, types)), earlier, encode, encoder.dim)
        ids = [entities.ids[i] for i in range(len(entities))] if hasattr(entities, "ids") else [e.id for e in entities]
        index = cls(vectors, np.asarray(rows, np.int32), names, entities=len(entities), ids_sha256=ids_digest(ids),
                    fingerprint=fingerprint, input=input, max_length=max_length)
        return index, resume

    def check(self, encoder: BiEncoder, ids: Sequence[str], kb_names: Optional[str] = None) -> None:
        """Refuse another entity encoder, or a KB other than the one the names were read from: other ids,
        or (``kb_names``: the KB's :func:`.digests.name_inputs_digest`, where both record one) other names."""
        if encoder.fingerprint() != self.fingerprint:
            raise EncoderMismatchError(
                f"this name index was built with entity encoder {self.fingerprint}, but the encoder given has "
                f"fingerprint {encoder.fingerprint()}; rebuild it (python -m spacy_pel build-names KB_DIR)")
        if len(ids) != self.entities or ids_digest(ids) != self.ids_sha256:
            raise InputError(f"this name index was built for another KB ({self.entities} entities, ids "
                             f"{self.ids_sha256[:12]}…), not this one ({len(ids)} entities; entities added with "
                             f"build-kb --add, or another KB); rebuild it (python -m spacy_pel build-names KB_DIR)")
        if kb_names and self.kb_names_sha256 and kb_names != self.kb_names_sha256:
            raise InputError("this name index was built from another release of this KB (the same ids, other names, "
                             "synonyms or types); rebuild it (python -m spacy_pel build-names KB_DIR)")

    def for_kb(self, old_ids: Sequence[str], new_ids: Sequence[str]) -> "NameIndex":
        """This index for a KB made of part of its own (``old_ids``, the KB it was built for; ``new_ids``:
        a KB with some records removed, as OKB does) without encoding again: the names of the kept
        entities, their rows renumbered. Entities of ``new_ids`` that ``old_ids`` lacks are refused."""
        if len(old_ids) != self.entities or ids_digest(old_ids) != self.ids_sha256:
            raise ValueError("for_kb: old_ids are not the ids of the KB this name index was built for")
        old_ids, new_ids = ([ids[i] for i in range(len(ids))] for ids in (old_ids, new_ids))
        old_row = {i: r for r, i in enumerate(old_ids)}
        missing = [i for i in new_ids if i not in old_row]
        if missing:
            raise ValueError(f"for_kb: {len(missing)} entities of the new KB are not in the old one ({missing[0]}, …); build its names")
        remap = np.full(self.entities, -1, np.int64)
        remap[[old_row[i] for i in new_ids]] = np.arange(len(new_ids))
        mapped = remap[self.entity_rows]
        keep = np.flatnonzero(mapped >= 0)
        # the same dtype and int8 screen as this index's own search (float32, none: its rows are read from disk)
        dtype, screened = (self.searcher.matrix.dtype, self.searcher.screened) if self.searcher else (torch.float32, False)
        searcher = FlatSearch(self.name_vectors(keep).to(dtype), screened)
        return NameIndex(None, mapped[keep], [self.names[i] for i in keep], entities=len(new_ids),
                         ids_sha256=ids_digest(new_ids), fingerprint=self.fingerprint, input=self.input,
                         max_length=self.max_length, searcher=searcher)

    # ------------------------------------------------------------------ searching
    def __len__(self) -> int:
        return len(self.entity_rows)

    def search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, KB rows) per query, each entity once with its best name's score; rows -1
        where fewer than k entities have names."""
        if self.searcher is None:
            raise ValueError("this name index was loaded with its vectors on disk (in_memory=False): it scores "
                             "given entities (best_name_scores) but does not search")
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        scores = np.zeros((len(queries), k), np.float32)
        rows = np.full((len(queries), k), -1, np.int64)
        if len(queries) == 0 or len(self) == 0:
            return scores, rows
        todo, fetch = np.arange(len(queries)), min(len(self), FETCH * k)
        while len(todo):
            found_s, found_n = self.searcher.search(queries[todo], fetch)
            short = []
            for q, s, n in zip(todo, found_s, found_n):
                ents = self.entity_rows[n]
                _, first = np.unique(ents, return_index=True)
                first = np.sort(first)[:k]  # best name of each entity, best first
                if len(first) < k and fetch < len(self):
                    short.append(q)
                    continue
                scores[q, : len(first)], rows[q, : len(first)] = s[first], ents[first]
            todo, fetch = np.asarray(short, np.int64), min(len(self), fetch * 2)
        return scores, rows

    def best_name_scores(self, queries: np.ndarray, rows: np.ndarray, *more: np.ndarray):
        """``[n, c]`` the best name score of KB row ``rows[i, j]`` for query ``i`` (-inf: row -1 or no
        names). With ``more`` query arrays (each ``[n, dim]``), a tuple of one such array per query
        array: the name vectors are gathered once for all of them."""
        sets = [torch.from_numpy(np.ascontiguousarray(q, dtype=np.float32)) for q in (queries, *more)]
        outs = [np.full(rows.shape, -np.inf, np.float32) for _ in sets]
        valid = rows >= 0
        safe = np.where(valid, rows, 0)
        counts = np.where(valid, self.ptr[safe + 1] - self.ptr[safe], 0).ravel()
        pairs = np.flatnonzero(counts)
        if len(pairs):
            sizes = counts[pairs]
            starts = self.ptr[safe.ravel()[pairs]]
            offsets = np.repeat(starts - np.cumsum(sizes) + sizes, sizes) + np.arange(int(sizes.sum()))
            name_rows = self.by_entity[offsets]
            query_of = np.repeat(pairs // rows.shape[1], sizes)
            products = np.empty((len(sets), len(name_rows)), np.float32)
            with torch.inference_mode():
                for a in range(0, len(name_rows), PAIRS_PER_CALL):
                    b = a + PAIRS_PER_CALL
                    vec, of = self.name_vectors(name_rows[a:b]), torch.from_numpy(query_of[a:b])
                    for m, q in enumerate(sets):
                        products[m, a:b] = (vec * q[of]).sum(1).numpy()
            bounds = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            for m, out in enumerate(outs):
                out.ravel()[pairs] = np.maximum.reduceat(products[m], bounds)
        return outs[0] if not more else tuple(outs)

    @property
    def names(self) -> List[str]:
        """The names, in row order."""
        if self._names is None:
            self._names = json.loads(self._names_file.read().decode("utf8"))
        return self._names

    def name_vectors(self, rows: np.ndarray) -> torch.Tensor:
        """float32 vectors of the name rows ``rows``, from memory or from disk."""
        if self.file is not None:
            return torch.from_numpy(self.file.rows(np.asarray(rows, np.int64)))
        return self.searcher.matrix[torch.from_numpy(np.asarray(rows, np.int64))].float()

    # ------------------------------------------------------------------ disk
    def meta(self) -> dict:
        dim = self.file.shape[1] if self.file is not None else self.searcher.matrix.shape[1]
        return {"format_version": FORMAT_VERSION, "names": len(self), "entities": self.entities, "dim": int(dim),
                "input": self.input, "max_length": self.max_length, "encoder_fingerprint": self.fingerprint,
                "kb_ids_sha256": self.ids_sha256, **({"kb_names_sha256": self.kb_names_sha256} if self.kb_names_sha256 else {})}

    def to_disk(self, path: PathLike) -> None:
        with atomic_dir(path) as tmp:
            if self.file is not None or self.saved is not None:  # as read, not the search's bf16 copy
                (self.file or self.saved).copy_to(tmp / VECTORS)
            else:
                np.save(tmp / VECTORS, self.searcher.matrix.float().numpy().astype(np.float16), allow_pickle=False)
            np.save(tmp / ROWS, self.entity_rows, allow_pickle=False)
            if self._names is None:
                self._names_file.copy_to(tmp / TEXTS)
            else:
                (tmp / TEXTS).write_text(json.dumps(self._names, ensure_ascii=False), encoding="utf8")
            (tmp / META).write_text(json.dumps(self.meta(), indent=2), encoding="utf8")

    @classmethod
    def from_disk(cls, path: PathLike, precision: str = "auto", in_memory: bool = True) -> "NameIndex":
        """``in_memory=False``: the vectors stay on disk and are read as name rows are scored (a few MB
        of memory instead of ~580 MB for MeSH's 756,400 names), prefetched into the OS page cache on a background
        thread (:meth:`VectorFile.prefetch`); such an index does not search."""
        path = Path(path)
        if not (path / META).exists():
            raise FileNotFoundError(f"{path} is not a name index folder (no {META}); build one with build-names")
        try:
            return cls._read(path, precision, in_memory)
        except (ValueError, EOFError, KeyError) as err:  # a truncated or overwritten file
            if isinstance(err, InputError):
                raise
            reason = f"{META} lacks {err}" if isinstance(err, KeyError) else next(
                (ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
            raise InputError(f"name index {path} is damaged ({reason[:300]}); build it again with build-names") from None

    @classmethod
    def _read(cls, path: Path, precision: str, in_memory: bool) -> "NameIndex":
        meta = json.loads((path / META).read_text(encoding="utf8"))
        if not isinstance(meta, dict):
            raise ValueError(f"{META} is not a JSON object")
        if "kb_ids_sha256" not in meta and "encoder_source" in meta:
            raise InputError(f"{path} is a KB folder (build-kb's output), not a name index (build-names')")
        if meta.get("format_version") != FORMAT_VERSION:
            raise InputError(f"{path}: name index format {meta.get('format_version')} is not {FORMAT_VERSION}")
        searcher = FlatSearch.from_npy(path / VECTORS, precision) if in_memory else None
        file = None if in_memory else VectorFile(path / VECTORS)
        if file is not None:
            file.prefetch()  # a cold page cache: read in order now rather than row by row in the first pass
        names = json.loads((path / TEXTS).read_text(encoding="utf8")) if in_memory else (path / TEXTS).resolve()
        rows = np.load(path / ROWS, allow_pickle=False)
        counts = {searcher.ntotal if in_memory else len(file), len(rows), meta["names"]} | ({len(names)} if in_memory else set())
        if len(counts) != 1:
            raise ValueError(f"{path}: {META}, {VECTORS}, {ROWS} and {TEXTS} disagree on the name count")
        return cls(None, rows, names, entities=meta["entities"], ids_sha256=meta["kb_ids_sha256"],
                   fingerprint=meta["encoder_fingerprint"], input=meta["input"], max_length=meta["max_length"],
                   searcher=searcher, file=file, saved=OpenedFile(path / VECTORS) if in_memory else None,
                   kb_names_sha256=meta.get("kb_names_sha256"))


def build_names(kb: PathLike, output: Optional[PathLike] = None, encoder: Optional[str] = None, input: str = "name",
                max_length: int = MAX_LENGTH, batch_size: int = 256, precision: str = "auto", device: str = "auto",
                progress: bool = True, chunk_size: Optional[int] = None, force: bool = False, ray=None,
                reuse: Optional[PathLike] = None) -> dict:
    """Build the name index of the KB folder ``kb`` into ``output`` (default ``kb/names``) with the KB's
    own entity encoder (or ``encoder``, which must match it); resumable from ``OUTPUT.partial/``.
    ``output`` and the KB (``KB.lock``, :mod:`.kb_lock`) are locked while it is built, so a build-kb of the
    KB is refused meanwhile (and the reverse); a name index there of another KB, encoder, input kind or
    length is replaced only with ``force``. ``ray``: :class:`.ray_build.RayOptions` (encoded on Ray);
    ``reuse``: an earlier name index (e.g. of the KB's last release) whose vectors unchanged names take.
    Returns the report also written to ``output/build_report.json`` (counts, seconds, names/s)."""
    if input not in INPUTS:
        raise InputError(f"unknown name input {input!r}; choose one of {', '.join(INPUTS)}")
    if not 4 <= max_length <= 512 or batch_size < 1 or (chunk_size is not None and chunk_size < 1):
        raise InputError("max length must be in 4..512 word pieces, and the batch size and chunk size at least 1")
    kb = Path(kb)
    output = Path(output) if output is not None else kb / NAMES_DIR
    check_output_folder(output, "name index", is_name_index)
    if ray is not None:
        ray.check()
    with kb_lock(kb, output), output_lock(output):  # KB.lock too: build-kb (--add, --force) replaces the folder read
        t0 = time.perf_counter()
        index = EntityIndex.from_disk(kb)
        enc = load_encoder(encoder or index.encoder_source, precision, device, rows="names")
        index.check_encoder(enc)
        t1 = time.perf_counter()
        work = output.with_name(output.name + ".partial")
        _check_replace(output, {"kb_ids_sha256": ids_digest(index.entities.ids), "encoder_fingerprint": enc.fingerprint(),
                                "input": input, "max_length": max_length}, force)
        names, resume = NameIndex.build(index.entities, enc, input=input, max_length=max_length, work=work,
                                        batch_size=batch_size, progress=progress, chunk_size=chunk_size, ray=ray,
                                        source=encoder or index.encoder_source, reuse=reuse)
        t2 = time.perf_counter()
        names.kb_names_sha256 = index.name_inputs
        names.to_disk(output)
        shutil.rmtree(work, ignore_errors=True)
        encoded = len(names) - resume.get("reused_entities", 0) - resume.get("reuse", {}).get("reused", 0)
        report = {"kb": str(kb), "output": str(output), "encoder": str(encoder or index.encoder_source), "input": input,
                  "max_length": max_length, "precision": enc.resolved_precision, "entities": len(index),
                  "names": len(names), "names_encoded": encoded, "encode_s": round(t2 - t1, 1),
                  "names_per_s": round(encoded / max(t2 - t1, 1e-9), 1), "wall_s": round(time.perf_counter() - t0, 1),
                  "resume": resume}
        atomic_write(output / "build_report.json", lambda tmp: tmp.write_text(json.dumps(report, indent=2), encoding="utf8"))
    return report


def _check_replace(output: Path, source: dict, force: bool) -> None:
    """Refuse to replace a name index folder made for another KB, encoder, input kind or length."""
    if force or not (output / META).is_file():
        return
    try:
        old = json.loads((output / META).read_text(encoding="utf8"))
    except (OSError, ValueError):
        old = {}
    changed = [k.replace("kb_ids_sha256", "KB").replace("encoder_fingerprint", "encoder").replace("_", " ")
               for k in source if old.get(k) != source[k]]
    if changed:
        raise InputError(f"{output} holds a name index built from other input ({', '.join(changed)} differ); "
                         "use --force to replace it")
