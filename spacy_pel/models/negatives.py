"""Negative entities for training, as KB row indices (SPEC section 1, "Negatives").

* :class:`RandomNegatives` -- uniform over the KB.
* :func:`in_batch` -- the other mentions' positives, with a mask.
* :class:`HardNegativeMiner` -- mixed-p: ``round(k·p)`` top-scoring wrong entities from an exact
  search over the current entity vectors (call :meth:`~HardNegativeMiner.refresh` periodically),
  the rest random.

``gold_rows[i]`` is the set of KB rows that are correct for mention ``i`` (a composite mention has
several). None of them is ever a negative of mention ``i``. Within one mention's negatives no row
repeats, unless the KB has fewer non-gold rows than ``k``.
"""
from __future__ import annotations

import itertools
from typing import Collection, Optional, Sequence, Tuple

import numpy as np
import torch

from .top_k import top_k_inner

GoldRows = Sequence[Collection[int]]


def _row_keys(sets: Sequence[Collection[int]], n_entities: int) -> Tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys ``row · n + value`` of per-row sets, and each row's count of distinct values."""
    sizes = [len(s) for s in sets]
    rows = np.repeat(np.arange(len(sets), dtype=np.int64), sizes)
    values = np.fromiter(itertools.chain.from_iterable(sets), dtype=np.int64, count=len(rows))
    bad = (values < 0) | (values >= n_entities)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"mention {int(rows[i])}: row {int(values[i])} outside a KB of {n_entities} rows")
    keys = np.unique(rows * n_entities + values)
    counts = np.bincount(keys // n_entities, minlength=len(sets)) if len(sets) else np.zeros(0, np.int64)
    return keys, counts


def _later_repeats(a: np.ndarray) -> np.ndarray:
    """Bool mask of entries equal to an earlier entry of the same row."""
    order = np.argsort(a, axis=1, kind="stable")
    ordered = np.take_along_axis(a, order, axis=1)
    repeat_sorted = np.zeros(a.shape, dtype=bool)
    repeat_sorted[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    repeat = np.zeros(a.shape, dtype=bool)
    np.put_along_axis(repeat, order, repeat_sorted, axis=1)
    return repeat


def _exact_row(
    rng: np.random.Generator, n_entities: int, k: int, forbidden: np.ndarray
) -> np.ndarray:
    """``k`` allowed rows by enumeration (small KBs or nearly-full rows); repeats only if unavoidable."""
    allowed = np.setdiff1d(np.arange(n_entities, dtype=np.int64), forbidden, assume_unique=False)
    return np.resize(rng.permutation(allowed), k)


def sample_excluding(
    rng: np.random.Generator,
    n_entities: int,
    k: int,
    forbidden: Sequence[Collection[int]],
    max_rounds: int = 32,
) -> np.ndarray:
    """``[B, k]`` int64 rows drawn uniformly from ``range(n_entities)`` minus ``forbidden[i]``.

    Vectorised rejection sampling: draw everything at once, redraw entries that hit a forbidden
    row or repeat an earlier one, until none is left. Rows where that would be slow (allowed rows
    fewer than ``2k``) or that are still unfinished after ``max_rounds`` are drawn by enumeration.
    """
    if n_entities <= 0:
        raise ValueError("the KB has no rows to sample negatives from")
    batch = len(forbidden)
    keys, counts = _row_keys(forbidden, n_entities)
    available = n_entities - counts
    if batch and (available <= 0).any():
        i = int(np.flatnonzero(available <= 0)[0])
        raise ValueError(f"mention {i}: every one of the {n_entities} KB rows is gold, no negative possible")
    out = rng.integers(0, n_entities, size=(batch, k), dtype=np.int64)
    if batch == 0 or k == 0:
        return out
    dense = available < 2 * k
    row_ids = np.arange(batch, dtype=np.int64)[:, None]
    bad = np.zeros(out.shape, dtype=bool)
    for _ in range(max_rounds):
        bad = np.isin(row_ids * n_entities + out, keys) | _later_repeats(out)
        bad[dense] = False
        n_bad = int(bad.sum())
        if n_bad == 0:
            break
        out[bad] = rng.integers(0, n_entities, size=n_bad, dtype=np.int64)
    else:
        dense = dense | bad.any(axis=1)
    for i in np.flatnonzero(dense):
        row_keys = keys[(keys >= i * n_entities) & (keys < (i + 1) * n_entities)]
        out[i] = _exact_row(rng, n_entities, k, row_keys - i * n_entities)
    return out


class RandomNegatives:
    """``k`` negatives per mention, uniform over the KB's ``n_entities`` rows minus its gold rows."""

    def __init__(self, n_entities: int, k: int, seed: int = 0):
        if n_entities <= 0 or k < 0:
            raise ValueError(f"need n_entities > 0 and k >= 0, got {n_entities} and {k}")
        self.n_entities = int(n_entities)
        self.k = int(k)
        self.rng = np.random.default_rng(seed)

    def sample(self, gold_rows: GoldRows) -> np.ndarray:
        """``[B, k]`` int64 negative rows, one line per mention."""
        return sample_excluding(self.rng, self.n_entities, self.k, gold_rows)


def in_batch(gold_rows: GoldRows, positives: Sequence[int], dedupe: bool = True) -> Tuple[np.ndarray, np.ndarray]:
    """In-batch negatives: mention ``i`` gets the other ``B-1`` mentions' positive rows.

    Returns ``rows [B, B-1]`` (int64; line ``i`` is ``positives`` without entry ``i``) and
    ``mask [B, B-1]`` (bool, ``False`` = ignore): a row gold for mention ``i`` (its own entity shared
    by another mention, or a composite partner) is masked, and with ``dedupe`` so is a repeat of
    an earlier row on the same line.
    """
    batch = len(positives)
    if len(gold_rows) != batch:
        raise ValueError(f"{len(gold_rows)} gold sets but {batch} positives")
    pos = np.asarray(positives, dtype=np.int64).reshape(batch)
    if batch == 0:
        return np.zeros((0, 0), np.int64), np.zeros((0, 0), bool)
    off_diagonal = ~np.eye(batch, dtype=bool)
    rows = np.broadcast_to(pos, (batch, batch))[off_diagonal].reshape(batch, batch - 1)
    if pos.min() < 0:
        raise ValueError("positive rows must be >= 0")
    n = int(max(pos.max(), max((max(g) for g in gold_rows if len(g)), default=0))) + 1
    keys, _ = _row_keys(gold_rows, n)
    mask = ~np.isin(np.arange(batch, dtype=np.int64)[:, None] * n + rows, keys)
    if dedupe and batch > 1:
        mask &= ~_later_repeats(rows)
    return rows, mask


def shared(gold_rows: GoldRows, positives: Sequence[int], sampled: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Shared negatives: every mention gets the batch's whole pool -- the other mentions' positives and
    every mention's ``sampled`` rows (``[B, k]``, e.g. hard ones), each distinct row once.

    Returns ``rows [B, P]`` (the same pool on every line) and ``mask [B, P]`` (``False`` where the row
    is gold for that mention). With a trained entity tower each pool row is encoded once a step, so a
    mention sees ``P`` negatives for the price of ``k`` of its own.
    """
    batch = len(positives)
    if len(gold_rows) != batch or sampled.shape[0] != batch:
        raise ValueError(f"{len(gold_rows)} gold sets and {sampled.shape[0]} sampled lines for {batch} positives")
    pool = np.unique(np.concatenate([np.asarray(positives, np.int64).reshape(-1), sampled.reshape(-1).astype(np.int64)]))
    rows = np.broadcast_to(pool, (batch, len(pool))).copy()
    mask = np.array([~np.isin(pool, np.fromiter(g, np.int64, len(g))) for g in gold_rows]).reshape(rows.shape)
    return rows, mask


class HardNegativeMiner:
    """Mixed-p negatives: ``round(k · hard_fraction)`` hard ones, the rest random.

    Hard negatives are the top-scoring non-gold rows of an exact inner-product search of the
    mention vectors over the entity vectors given to the last :meth:`refresh` (:func:`top_k_inner`; a
    FAISS flat index was 37% of a training step). Random ones are
    uniform over the other non-gold rows and never repeat a hard one. Before the first refresh (or
    with ``hard_fraction = 0``) all are random; that needs ``n_entities``.
    """

    def __init__(self, k: int, hard_fraction: float = 0.5, seed: int = 0, n_entities: Optional[int] = None):
        if k < 0 or not 0.0 <= hard_fraction <= 1.0:
            raise ValueError(f"need k >= 0 and 0 <= hard_fraction <= 1, got {k} and {hard_fraction}")
        self.k = int(k)
        self.hard_fraction = float(hard_fraction)
        self.n_hard = int(np.floor(self.k * self.hard_fraction + 0.5))
        self.n_entities = n_entities
        self.rng = np.random.default_rng(seed)
        self.matrix: Optional[torch.Tensor] = None  # [n_entities, d] fp32

    def refresh(self, entity_vectors: np.ndarray) -> None:
        """Rebuild the search index from the current entity vectors ``[n_entities, d]``."""
        vectors = np.ascontiguousarray(entity_vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) == 0:
            raise ValueError(f"entity vectors must be a non-empty [n, d] array, got shape {vectors.shape}")
        if self.n_entities is not None and len(vectors) != self.n_entities:
            raise ValueError(f"{len(vectors)} entity vectors for a KB of {self.n_entities} rows")
        self.matrix = torch.from_numpy(vectors.copy())
        self.n_entities = len(vectors)

    def hard(self, mention_vecs: np.ndarray, gold_rows: GoldRows, n: int) -> Tuple[np.ndarray, np.ndarray]:
        """The ``n`` top-scoring non-gold rows per mention ``[B, n]`` and which are real ``[B, n]``.

        The search goes ``n + (largest gold set)`` deep, so golds can be skipped; slots stay unreal
        only when the KB has fewer than ``n`` non-gold rows.
        """
        if self.matrix is None:
            raise RuntimeError("call refresh() with the entity vectors first")
        queries = np.ascontiguousarray(mention_vecs, dtype=np.float32)
        dim = self.matrix.shape[1]
        if queries.ndim != 2 or queries.shape != (len(gold_rows), dim):
            raise ValueError(f"mention vectors {queries.shape} do not fit {len(gold_rows)} mentions of dim {dim}")
        keys, counts = _row_keys(gold_rows, self.n_entities)
        depth = min(self.n_entities, n + int(counts.max(initial=0)))
        found = top_k_inner(torch.from_numpy(queries), self.matrix, depth)[1].numpy()
        row_ids = np.arange(len(found), dtype=np.int64)[:, None]
        usable = ~np.isin(row_ids * self.n_entities + found, keys)
        order = np.argsort(~usable, axis=1, kind="stable")[:, :n]  # usable ones first, in score order
        rows = np.take_along_axis(found, order, axis=1)
        real = np.take_along_axis(usable, order, axis=1)
        if rows.shape[1] < n:  # a KB smaller than n
            pad = n - rows.shape[1]
            rows = np.pad(rows, ((0, 0), (0, pad)), constant_values=-1)
            real = np.pad(real, ((0, 0), (0, pad)), constant_values=False)
        return rows, real

    def sample(self, mention_vecs: Optional[np.ndarray], gold_rows: GoldRows) -> np.ndarray:
        """``[B, k]`` int64 negative rows: the hard ones first, then the random ones."""
        if self.n_entities is None:
            raise RuntimeError("HardNegativeMiner needs n_entities or a refresh() before sampling")
        if self.matrix is None or self.n_hard == 0:
            return sample_excluding(self.rng, self.n_entities, self.k, gold_rows)
        hard, real = self.hard(mention_vecs, gold_rows, self.n_hard)
        forbidden = [set(g) | set(h[r].tolist()) for g, h, r in zip(gold_rows, hard, real)]
        # a KB too small to avoid the hard rows: random ones may repeat them, never a gold one
        forbidden = [f if len(f) < self.n_entities else set(g) for f, g in zip(forbidden, gold_rows)]
        random = sample_excluding(self.rng, self.n_entities, self.k, forbidden)
        # unreal hard slots (tiny KBs) take random rows from the spare columns
        hard = np.where(real, hard, random[:, self.k - self.n_hard :])
        return np.concatenate([hard, random[:, : self.k - self.n_hard]], axis=1)
