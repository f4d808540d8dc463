"""Searching a KB's vectors: exact top-k with torch for ``flat`` KBs, and for ``ivfpq`` KBs (millions of
entities) compressed FAISS candidates rescored exactly with the vectors read from disk.

FAISS's flat index runs ~90 queries/s on 2 cores below ~1,000 queries a call (its BLAS path only pays
off for large batches), which is what a pipeline sends when the rules decide most mentions or when
documents come one at a time; a torch matrix product over the same vectors runs ~500 queries/s at
any batch size. The vectors are held in bf16 where the CPU has bf16 units (``precision="auto"``,
272 MB for MeSH instead of FAISS's 544 MB of float32), else in float32. On a CPU with VNNI and no bf16
units, ``auto`` is ``int8``: each query's best rows are first found by int8 products
(:class:`~spacy_pel.retrieval.int8_screen.Int8Screen`, 136 MB for MeSH), then rescored exactly in float32
from the vectors, held in float16 as a KB saves them (272 MB: less memory than float32 in all).
"""
from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Iterator, Optional, Tuple, Union

import faiss
import numpy as np
import torch

from ..models.forked_sessions import inherited
from ..models.precision import search_precision
from ..models.top_k import top_k_inner
from .int8_screen import Int8Screen

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
SCREEN_DEPTH = 64  # int8 search: rows rescored exactly per query, at least SCREEN_MARGIN × k; benchmarks/int8_search.md
SCREEN_MARGIN = 4
RESCORE_QUERIES = 256  # int8 search: queries whose candidate vectors are gathered at once
READ_ROWS = 1 << 15
PREFETCH_CHUNK = 1 << 24  # bytes a read while prefetching a vector file
PREFETCH_SHARE = 0.25  # prefetch a vector file only when it is at most this share of the free memory
NPROBE, REFINE = 512, 100  # ivfpq: benchmarks/large_kb.md, 0.18 pt below exact R@1 at 2.4M entities


def _storage(precision: str) -> Tuple[torch.dtype, bool]:
    """The dtype the vectors are held in, and whether an int8 screen comes first (then float16, as a KB
    saves them: the rows rescored are exactly the saved vectors, in half fp32's memory)."""
    resolved = search_precision(precision, torch.device("cpu"))
    return (torch.float16, True) if resolved == "int8" else (DTYPES[resolved], False)


def read_npy_header(f, path) -> Tuple[tuple, np.dtype]:
    """Shape and dtype of the 2-d C-ordered ``.npy`` open as ``f``, which is left at the first row."""
    major, _ = np.lib.format.read_magic(f)
    read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(f)
    if fortran or len(shape) != 2:
        raise ValueError(f"{path}: expected a C-ordered 2-d array, got shape {shape}")
    return shape, dtype


def read_matrix(path: Union[str, Path], dtype: torch.dtype) -> torch.Tensor:
    """An ``.npy`` matrix read into a torch tensor of ``dtype`` by chunks (no memory map left behind,
    no full-size temporary copy)."""
    with open(path, "rb") as f:
        shape, stored = read_npy_header(f, path)
        out = torch.empty(shape, dtype=dtype)
        for start in range(0, shape[0], READ_ROWS):
            n = min(READ_ROWS, shape[0] - start)
            chunk = np.fromfile(f, dtype=stored, count=n * shape[1]).reshape(n, shape[1])
            out[start : start + n] = torch.from_numpy(chunk.astype(np.float32, copy=False))
    return out


class FlatSearch:
    """Exact search: scores are the products of the query and entity vectors in the matrix's dtype (float32
    for a float16 matrix). With ``screened``, only each query's best ``max(SCREEN_DEPTH, SCREEN_MARGIN * k)``
    rows by int8 products are scored, in fp32; a bf16 matrix's best as many by bf16 products likewise (bf16
    scores tie: the ranking would depend on float noise, so on how documents were batched)."""

    def __init__(self, matrix: torch.Tensor, screened: bool = False):
        self.matrix, self.screened = matrix, screened
        self.compute_dtype = torch.float32 if matrix.dtype == torch.float16 else matrix.dtype
        self._screen: Optional[Int8Screen] = None  # made at the first search: a process that never searches pays nothing
        self._lock = threading.Lock()

    @classmethod
    def from_array(cls, vectors: np.ndarray, precision: str = "auto") -> "FlatSearch":
        dtype, screened = _storage(precision)
        return cls(torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32)).to(dtype), screened)

    @classmethod
    def from_npy(cls, path: Union[str, Path], precision: str = "auto") -> "FlatSearch":
        dtype, screened = _storage(precision)
        return cls(read_matrix(path, dtype), screened)

    @property
    def ntotal(self) -> int:
        return self.matrix.shape[0]

    def add(self, vectors: np.ndarray) -> None:
        new = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32)).to(self.matrix.dtype)
        self.matrix = torch.cat([self.matrix, new])
        self._screen = None

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        return self.matrix[start : start + n].float().numpy()

    def search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Top-k ``(scores [n, k] float32, rows [n, k] int64)``, best first."""
        q32 = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
        q = q32.to(self.compute_dtype)
        k = min(k, self.ntotal)
        if not len(q):
            return np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
        depth = max(SCREEN_DEPTH, SCREEN_MARGIN * k)
        if self.screened and self.ntotal > depth:
            with self._lock:
                if self._screen is None or inherited(self._screen):  # a forked child's own (.forked_sessions)
                    self._screen = Int8Screen(self.matrix)
            return self._rescored(torch.from_numpy(self._screen(queries, depth)), q32, k)
        if self.compute_dtype == torch.bfloat16:
            # bf16 products move in steps of ~0.004: near-equal rows tie, and float noise in the query (what
            # was batched with it) would break the tie; the best `depth` are rescored in fp32 instead (all of
            # them in a KB, or a label's subset, of no more than k rows: their scores are exact too)
            _, found = top_k_inner(q, self.matrix, min(depth, self.ntotal))
            return self._rescored(found, q32, k)
        scores, rows = top_k_inner(q, self.matrix.to(self.compute_dtype), k)
        return scores.numpy(), rows.numpy()

    def _rescored(self, found: torch.Tensor, q: torch.Tensor, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Each query's candidate rows ``found`` (by int8 or bf16 products) scored exactly in fp32 (``q``: the
        queries in fp32): the top k."""
        scores, rows = [], []
        with torch.inference_mode():
            for start in range(0, len(q), RESCORE_QUERIES):
                cand = found[start : start + RESCORE_QUERIES]
                vectors = self.matrix[cand].float()
                exact = torch.bmm(vectors, q[start : start + RESCORE_QUERIES, :, None])[..., 0]
                top = torch.topk(exact, k, dim=1)
                scores.append(top.values)
                rows.append(torch.gather(cand, 1, top.indices))
        return torch.cat(scores).numpy(), torch.cat(rows).numpy()

    def __getstate__(self) -> dict:
        """Pickled without its int8 screen (an ONNX Runtime session): each process makes its own."""
        return {"matrix": self.matrix, "screened": self.screened}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["matrix"], state["screened"])

    def subset(self, rows: np.ndarray) -> "SubsetSearch":
        """Exact search among ``rows`` only (their vectors copied once)."""
        rows = np.asarray(rows, dtype=np.int64)
        return SubsetSearch(FlatSearch(self.matrix[torch.from_numpy(rows)].contiguous(), self.screened), rows)


class SubsetSearch:
    """Exact search among some rows of a KB, answered in the whole KB's row numbers (rows -1 where
    the subset has fewer than k): what a label whose entity types are a small part of the KB searches
    (``spacy_pel.rules.label_types.v1``: MeSH's ~13k disease rows, not its 354k)."""

    def __init__(self, flat: FlatSearch, rows: np.ndarray):
        """``flat``: the search over exactly these ``rows``' vectors, in their order."""
        self.rows = np.asarray(rows, dtype=np.int64)
        if flat.ntotal != len(self.rows):
            raise ValueError(f"{len(self.rows)} rows but {flat.ntotal} vectors to search")
        self.flat = flat

    def search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        scores, found = self.flat.search(queries, k)
        out_scores, out_rows = np.zeros((len(queries), k), np.float32), np.full((len(queries), k), -1, np.int64)
        out_scores[:, : found.shape[1]], out_rows[:, : found.shape[1]] = scores, self.rows[found]
        return out_scores, out_rows


class OpenedFile:
    """A file opened once and read through its descriptor (``os.pread``): still readable — and copied whole
    by :meth:`copy_to` — once the file is removed, as a pipeline read from bytes removes the folder it was
    unpacked to. Pickled by path (``nlp.pipe(n_process=…)`` with spawned processes): each process opens
    its own file; once the file at that path is gone or another, by its contents, which the process that
    unpickles them reads from an unlinked temporary file."""

    def __init__(self, path: Union[str, Path]):
        self.path = str(path)
        self.fd = os.open(self.path, os.O_RDONLY)

    def read(self) -> bytes:
        return b"".join(fd_chunks(self.fd))

    def read_range(self, start: int, end: int) -> bytes:
        """Bytes ``start:end`` of the file (one record of an entity table's ``entities.jsonl``)."""
        return os.pread(self.fd, int(end) - int(start), int(start))

    def copy_to(self, dest: Union[str, Path]) -> None:
        copy_fd(self.fd, dest)

    def __getstate__(self) -> dict:
        try:
            here, held = os.stat(self.path), os.fstat(self.fd)
            if (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino):
                return {"path": self.path}
        except OSError:
            pass
        return {"contents": self.read()}

    def __setstate__(self, state: dict) -> None:
        if "path" in state:
            return self.__init__(state["path"])
        handle, path = tempfile.mkstemp(prefix="spacy_pel_")
        try:
            with os.fdopen(handle, "wb") as f:
                f.write(state["contents"])
            self.__init__(path)
        finally:
            os.unlink(path)  # read through the descriptor from now on, removed with it

    def __del__(self):
        fd = getattr(self, "fd", None)
        if fd is not None:
            os.close(fd)


class VectorFile(OpenedFile):
    """Rows of an ``.npy`` matrix read from disk on demand (``os.pread``: nothing memory-mapped, so
    the rows read stay in the OS page cache, not in this process's memory)."""

    def __init__(self, path: Union[str, Path]):
        super().__init__(path)
        with open(self.path, "rb") as f:
            self.shape, self.dtype = read_npy_header(f, path)
            self.offset = f.tell()
        self.row_bytes = self.shape[1] * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def prefetch(self) -> bool:
        """Read the whole file once, in order, on a background thread, so that the OS page cache holds it
        before the first rows are wanted: a process started on a cold cache (after a reboot, a copy, an
        install) otherwise reads its rows one scattered ``pread`` at a time (MeSH's name rows, 581 MB:
        ~1.1 s read in order, 1-7 s of random reads in the first ``nlp.pipe`` pass). Nothing is held in this
        process's memory. Skipped (``False``) when the file is more than ``PREFETCH_SHARE`` of the free memory."""
        size = os.path.getsize(self.path)
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):  # not a POSIX system: no prefetch
            return False
        if size > PREFETCH_SHARE * free:
            return False
        threading.Thread(target=_read_through, args=(self.path,), name="pel-prefetch", daemon=True).start()
        return True

    def rows(self, idx: np.ndarray) -> np.ndarray:
        """float32 rows ``idx`` (any order, repeats allowed); one read per run of adjacent rows (an
        entity's names lie side by side in a name index)."""
        idx = np.asarray(idx, dtype=np.int64)
        out = np.empty((len(idx), self.shape[1]), np.float32)
        if not len(idx):
            return out
        order = np.argsort(idx, kind="stable")
        wanted = idx[order]
        cuts = np.flatnonzero(np.diff(wanted) > 1) + 1
        rows, places = wanted.tolist(), order.tolist()
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(rows)]):
            lo, hi = rows[a], rows[b - 1]
            raw = os.pread(self.fd, (hi - lo + 1) * self.row_bytes, self.offset + lo * self.row_bytes)
            if b - a == 1:
                out[places[a]] = np.frombuffer(raw, dtype=self.dtype)
                continue
            block = np.frombuffer(raw, dtype=self.dtype).reshape(hi - lo + 1, self.shape[1])
            out[order[a:b]] = block[wanted[a:b] - lo]
        return out



def _read_through(path: str) -> int:
    """Read ``path`` from start to end and drop what was read (its pages stay in the OS page cache);
    the number of bytes read (0 if the file is gone: a folder unpacked from bytes, removed)."""
    buffer, total = bytearray(PREFETCH_CHUNK), 0
    try:
        f = open(path, "rb", buffering=0)
    except FileNotFoundError:
        return 0
    with f:
        while True:
            n = f.readinto(buffer)
            if not n:
                return total
            total += n


def fd_chunks(fd: int, chunk: int = PREFETCH_CHUNK) -> Iterator[bytes]:
    """The contents of an open file from its start (``os.pread``: the descriptor's offset does not move)."""
    offset = 0
    while True:
        data = os.pread(fd, chunk, offset)
        if not data:
            return
        offset += len(data)
        yield data


def copy_fd(fd: int, dest: Union[str, Path]) -> None:
    """Write the contents of an open file to ``dest``."""
    with open(dest, "wb") as out:
        for data in fd_chunks(fd):
            out.write(data)


class InMemoryVectors:
    """The same interface as :class:`VectorFile` over an array (a KB being built)."""

    def __init__(self, vectors: np.ndarray):
        self.vectors = vectors

    def __len__(self) -> int:
        return len(self.vectors)

    def rows(self, idx: np.ndarray) -> np.ndarray:
        return np.asarray(self.vectors[idx], dtype=np.float32)


class RefinedSearch:
    """Approximate candidates from a compressed FAISS index (IVF-PQ: ~100 bytes an entity), then the
    best ``refine`` of them rescored exactly with the saved vectors, read from disk."""

    def __init__(self, index, vectors, nprobe: int = NPROBE, refine: int = REFINE):
        self.index, self.vectors, self.refine = index, vectors, refine
        self.set_nprobe(nprobe)

    def set_nprobe(self, nprobe: int) -> None:
        faiss.extract_index_ivf(self.index).nprobe = nprobe
        self.nprobe = nprobe

    @property
    def ntotal(self) -> int:
        return self.index.ntotal

    def add(self, vectors: np.ndarray) -> None:
        raise ValueError("a compressed (ivfpq) KB cannot be extended in place: rebuild it with the new entities")

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        return self.vectors.rows(np.arange(start, start + n))

    def search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        depth = min(max(k, self.refine), self.ntotal)
        _, found = self.index.search(queries, depth)
        scores = np.full((len(queries), k), -np.inf, np.float32)
        rows = np.full((len(queries), k), -1, np.int64)
        for i, cand in enumerate(found):
            cand = cand[cand >= 0]
            exact = self.vectors.rows(cand) @ queries[i]
            top = np.argsort(-exact, kind="stable")[:k]
            scores[i, : len(top)], rows[i, : len(top)] = exact[top], cand[top]
        return scores, rows
