"""The arborescence objective of arboEL (SPEC §3), for retriever training.

* :func:`arborescence_positives` -- over a gold entity and its coreferent mentions (edge weight =
  -affinity), the minimum spanning arborescence rooted at the entity (networkx's Edmonds
  algorithm); each mention's incoming edge is its positive.
* :class:`ArborescenceTargets` -- a cache of training-mention vectors (refreshed every
  ``refresh_every`` steps) that gives each batch mention its parent vector and its nearest
  non-coreferent mentions.
* :class:`ArborescenceLoss` -- the step loss: the mention's parent is the positive, the k/2 nearest
  wrong entities and k/2 nearest non-coreferent training mentions are the negatives.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

import networkx as nx
import numpy as np
import torch

from ..models.encoder import BiEncoder
from ..models.losses import Loss
from ..models.negatives import HardNegativeMiner
from ..retrieval.search import FlatSearch

ROOT = -1  # the entity, in the parent lists of arborescence_positives
AFFINITY_SCALE = 10**6  # arborescence affinities are compared at this resolution (exact integer sums)


def arborescence_positives(entity_mention_aff: np.ndarray, mention_mention_aff: np.ndarray) -> List[int]:
    """The parent of each coreferent mention in the minimum spanning arborescence rooted at their
    gold entity: ``-1`` (:data:`ROOT`) = the entity, else the index of the parent mention.

    ``entity_mention_aff[i]`` is ψ(e, m_i), the weight of edge e → m_i; ``mention_mention_aff[j, i]``
    is φ(m_j, m_i), the weight of edge m_j → m_i (the diagonal is ignored). Edge weight = -affinity,
    no edge enters the entity, and networkx's Edmonds algorithm finds the arborescence, so the
    entity is its root. Each (parent, mention) pair is a positive.

    Ties are broken deterministically: affinities are compared at a resolution of
    1/:data:`AFFINITY_SCALE` and the weights are exact integers ``-q * S + r`` with ``r`` the parent's
    rank (entity 0, mention j → j + 1) and ``S`` larger than any sum of ranks, so among
    arborescences of equal total affinity the one with the smallest rank sum wins (the entity is
    preferred as a parent, then lower mention indices).
    """
    ent = np.asarray(entity_mention_aff, dtype=np.float64).reshape(-1)
    n = len(ent)
    mm = np.asarray(mention_mention_aff, dtype=np.float64)
    if mm.shape != (n, n):
        raise ValueError(f"{n} entity affinities need a [{n}, {n}] mention affinity matrix, not {mm.shape}")
    if n == 0:
        return []
    if not (np.isfinite(ent).all() and np.isfinite(mm).all()):
        raise ValueError("affinities must be finite")
    scale = n * n + 1  # exceeds the largest possible sum of parent ranks (n mentions, rank ≤ n)
    q_ent = np.rint(ent * AFFINITY_SCALE).astype(np.int64)
    q_mm = np.rint(mm * AFFINITY_SCALE).astype(np.int64)
    graph = nx.DiGraph()
    graph.add_nodes_from([ROOT, *range(n)])
    graph.add_edges_from((ROOT, i, {"weight": -int(q_ent[i]) * scale}) for i in range(n))
    graph.add_edges_from(
        (j, i, {"weight": -int(q_mm[j, i]) * scale + j + 1}) for j in range(n) for i in range(n) if i != j
    )
    tree = nx.minimum_spanning_arborescence(graph, attr="weight")
    parents = {child: parent for parent, child in tree.edges()}
    return [int(parents[i]) for i in range(n)]


class ArborescenceTargets:
    """Per-mention positives for the arborescence objective, from a cache of training-mention
    vectors refreshed every ``refresh_every`` steps (a cluster larger than ``max_cluster`` is cut to
    the mention and its ``max_cluster - 1`` nearest coreferent mentions, to bound Edmonds' cost).

    ``inputs`` are the training mentions' encoder inputs and ``gold`` their gold KB rows; a mention's
    cluster is every mention with the same smallest gold row.
    """

    def __init__(self, inputs: Sequence, gold: Sequence[Set[int]], refresh_every: int, max_cluster: int):
        if refresh_every < 1 or max_cluster < 1:
            raise ValueError(f"need refresh_every >= 1 and max_cluster >= 1, got {refresh_every} and {max_cluster}")
        self.inputs, self.refresh_every, self.max_cluster = inputs, refresh_every, max_cluster
        self.entity = np.array([min(g) for g in gold], dtype=np.int64)
        members: Dict[int, List[int]] = {}
        for i, e in enumerate(self.entity):
            members.setdefault(int(e), []).append(i)
        self.members = {e: np.array(v, dtype=np.int64) for e, v in members.items()}
        self.vectors: Optional[np.ndarray] = None
        self.index = None

    def due(self, step: int) -> bool:
        """Whether the cache must be (re)computed before ``step``."""
        return self.vectors is None or step % self.refresh_every == 0

    def refresh(self, encoder: BiEncoder, normalize: bool) -> None:
        inputs = self.inputs
        fn = lambda batch: encoder.embed_mentions(batch, normalize=normalize)  # noqa: E731
        self.vectors = encoder._encode(inputs, [len(s) for s, _ in inputs], fn, 64, "mention cache", False)
        self.index = FlatSearch.from_array(self.vectors, "fp32")

    def positive(self, i: int, table: torch.Tensor) -> torch.Tensor:
        """The vector of mention ``i``'s parent: its entity's (table) or a coreferent mention's (cache)."""
        e = int(self.entity[i])
        cluster = self.members[e]
        vecs = self.vectors[cluster]
        if len(cluster) > self.max_cluster:
            near = np.argsort(-(vecs @ self.vectors[i]), kind="stable")[: self.max_cluster]
            if not (cluster[near] == i).any():
                near[-1] = int(np.flatnonzero(cluster == i)[0])
            cluster, vecs = cluster[near], vecs[near]
        entity_vec = table[e].cpu().numpy()
        parents = arborescence_positives(vecs @ entity_vec, vecs @ vecs.T)
        parent = parents[int(np.flatnonzero(cluster == i)[0])]
        return table[e] if parent == ROOT else torch.from_numpy(self.vectors[cluster[parent]])

    def negatives(self, query: np.ndarray, idx: np.ndarray, n: int) -> Tuple[np.ndarray, np.ndarray]:
        """The ``n`` nearest training mentions of another gold entity, per batch mention."""
        _, found = self.index.search(np.ascontiguousarray(query, dtype=np.float32), min(len(self.entity), n * 4 + 32))
        rows = np.zeros((len(idx), n), dtype=np.int64)
        real = np.zeros((len(idx), n), dtype=bool)
        for b, i in enumerate(idx):
            ok = [j for j in found[b] if self.entity[j] != self.entity[i]][:n]
            rows[b, : len(ok)], real[b, : len(ok)] = ok, True
        return rows, real


class ArborescenceLoss:
    """arboEL's step loss over a batch of training mentions ``idx`` with vectors ``m``: the positive
    is the mention's parent in the minimum spanning arborescence of its gold entity's cluster; the
    negatives are the ``k/2`` nearest wrong entities (``miner``, refreshed with the KB ``table``)
    and ``k/2`` nearest non-coreferent training mentions."""

    def __init__(self, targets: ArborescenceTargets, loss: Loss, table: torch.Tensor, miner: HardNegativeMiner, k: int):
        self.targets, self.loss, self.table, self.miner, self.k = targets, loss, table, miner, k
        self.miner.refresh(table.cpu().numpy())

    def __call__(self, m: torch.Tensor, gold: Sequence[Set[int]], idx: np.ndarray) -> torch.Tensor:
        arbo, table = self.targets, self.table
        query = m.detach().float().cpu().numpy()
        half = max(1, self.k // 2)
        ent_rows, ent_real = self.miner.hard(query, gold, half)
        men_rows, men_real = arbo.negatives(query, idx, self.k - half)
        pos = torch.stack([arbo.positive(int(i), table) for i in idx])
        cache = torch.from_numpy(arbo.vectors).to(m.device)
        neg = torch.cat([table[torch.from_numpy(np.maximum(ent_rows, 0))], cache[torch.from_numpy(men_rows)]], dim=1)
        mask = torch.from_numpy(np.concatenate([ent_real, men_real], axis=1)).to(m.device)
        return self.loss(m, pos.to(m.device), neg, mask)
