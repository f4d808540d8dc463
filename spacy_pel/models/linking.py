"""The linking loss shared by the retriever, the joint end-to-end model and ``pel_linker.update``
(``spacy train``) (SPEC §1-2).

Mention vectors ``m`` ``[B, d]`` and each mention's gold KB rows go in; the positive is the smallest
gold row (the first of a tuple: a KB synonym's own entity, the others that share it only masked), the negatives come from the strategy chosen by ``[negatives] kind``:

* ``"sampled"`` -- ``count`` per mention, ``hard_fraction`` of them the top-scoring wrong entities of
  a FAISS search (:class:`~spacy_pel.models.negatives.HardNegativeMiner`), the rest uniform;
* ``"in_batch"`` -- the other mentions' positives;
* ``"shared"`` -- the batch's pool for every mention: the other mentions' positives and every
  mention's ``count`` sampled (random / hard) rows (:func:`~spacy_pel.models.negatives.shared`): with a
  trained entity tower each row is encoded once a step, so ``B × count`` rows serve every mention;
* ``"kb"`` -- every KB row that is not gold: an exact softmax over the KB's stored vectors (a
  frozen entity tower only; one ``[B, d] × [d, N]`` product).

Entity vectors come from ``entity_vectors(rows)``: the KB's stored table (:func:`table_lookup`, a
frozen tower) or a fresh pass of a trained entity tower. An optional
adversarial term (``fgsm``: :class:`~spacy_pel.training.fgsm.FGSM`, called as
``fgsm(loss, m, positives, rows, mask)``) is added (for ``"kb"`` it perturbs the
``count`` top-scoring wrong entities).

Entity spaces (``[training] entity_space``, :data:`ENTITY_SPACES`): ``"raw"`` uses the KB's vectors as
they are; ``"centred"`` uses ``normalize(e - μ)`` (:func:`centre_vectors`), ``μ`` the mean unit entity
vector of the KB (:func:`entity_centre`). A frozen tower's vectors are anisotropic (every pair has a
positive cosine), so the proxy loss's decoupled negative term can be lowered by moving every mention
away from ``μ`` at once, which changes no ranking; centring removes that shortcut. The same
transform must then be applied to the KB searched at inference (``μ`` is saved with the encoder).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Set, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from .losses import Loss
from .negatives import HardNegativeMiner, in_batch, shared

Tensor = torch.Tensor
ENTITY_SPACES = ("raw", "centred")
AdversarialTerm = Callable[[Tensor, Tensor, Sequence[int], np.ndarray, Tensor], Tensor]  # FGSM
NEGATIVE_KINDS = ("sampled", "in_batch", "kb", "shared")


def whole_kb_scores(m: Tensor, table: Tensor, gold: Sequence[Set[int]], kind: str) -> Tuple[Tensor, Tensor]:
    """Scores of every mention against every KB row ``[B, N]`` and the non-gold mask ``[B, N]``.

    With a frozen entity tower the KB's vectors are a constant ``table``, so the softmax can run
    over all of it instead of over sampled negatives. ``kind`` is the loss's similarity ("cosine"
    normalises both sides, "dot" does not).
    """
    if kind == "cosine":
        m, table = F.normalize(m, dim=-1), F.normalize(table, dim=-1)
    scores = m @ table.T
    mask = torch.ones(scores.shape, dtype=torch.bool, device=m.device)
    for i, g in enumerate(gold):
        mask[i, list(g)] = False
    return scores, mask


def entity_centre(vectors: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """``μ``: the mean of the unit-length rows of ``vectors`` ``[N, d]`` (float32 ``[d]``), in chunks
    (the KB's table may be memory-mapped)."""
    if len(vectors) == 0:
        raise ValueError("no entity vectors to centre")
    total = np.zeros(vectors.shape[1], np.float64)
    for start in range(0, len(vectors), chunk):
        v = np.asarray(vectors[start : start + chunk], dtype=np.float32)
        total += (v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)).sum(0)
    return (total / len(vectors)).astype(np.float32)


def centre_vectors(vectors, centre):
    """``normalize(normalize(e) - μ)`` per row, for a torch tensor or a numpy array (float32 out)."""
    if isinstance(vectors, torch.Tensor):
        mu = torch.as_tensor(centre, dtype=vectors.dtype, device=vectors.device)
        return F.normalize(F.normalize(vectors, dim=-1) - mu, dim=-1)
    v = np.asarray(vectors, dtype=np.float32)
    v = v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12) - np.asarray(centre, np.float32)
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def table_lookup(table: Tensor) -> Callable[[np.ndarray], Tensor]:
    """``rows`` (any shape) → their vectors in the KB's stored ``table`` (shape + ``[d]``)."""

    def vectors(rows: np.ndarray) -> Tensor:
        return table[torch.from_numpy(rows.reshape(-1))].reshape(*rows.shape, table.shape[1])

    return vectors


class LinkingLoss:
    """``loss(m, gold) -> scalar``: the configured loss over the positives and the negatives of ``kind``."""

    def __init__(self, loss: Loss, kind: str, miner: HardNegativeMiner, table: Tensor,
                 entity_vectors: Optional[Callable[[np.ndarray], Tensor]] = None, fgsm: Optional[AdversarialTerm] = None):
        if kind not in NEGATIVE_KINDS:
            raise ValueError(f"negatives.kind must be one of {NEGATIVE_KINDS}, not {kind!r}")
        self.loss, self.kind, self.miner, self.table, self.fgsm = loss, kind, miner, table, fgsm
        self.entity_vectors = entity_vectors or table_lookup(table)

    def negatives(self, m: Tensor, gold: Sequence[Set[int]], positives: Sequence[int]) -> Tuple[np.ndarray, np.ndarray]:
        """``[B, N]`` negative KB rows and which of them count (``"sampled"``, ``"in_batch"``, ``"shared"``)."""
        if self.kind == "in_batch":
            return in_batch(gold, positives)
        rows = self.miner.sample(m.detach().float().cpu().numpy(), gold)
        if self.kind == "shared":
            return shared(gold, positives, rows)
        return rows, np.ones(rows.shape, dtype=bool)

    def __call__(self, m: Tensor, gold: Sequence[Set[int]]) -> Tensor:
        positives = [g[0] if isinstance(g, tuple) else min(g) for g in gold]  # a tuple names its positive first
        pos = self.entity_vectors(np.asarray(positives))
        if self.kind == "kb":
            neg_s, mask = whole_kb_scores(m, self.table, gold, self.loss.kind)
            loss = self.loss.from_scores(self.loss.scores(m, pos), neg_s, mask)
            if self.fgsm is None:
                return loss
            k = min(self.miner.k, neg_s.shape[1])
            top = neg_s.detach().masked_fill(~mask, float("-inf")).topk(k, dim=1).indices
            rows, mask = top.cpu().numpy(), torch.ones(top.shape, dtype=torch.bool, device=m.device)
        else:
            rows, real = self.negatives(m, gold, positives)
            mask = torch.from_numpy(real).to(m.device)
            loss = self.loss(m, pos, self.entity_vectors(rows), mask)
        return loss if self.fgsm is None else self.fgsm(loss, m, positives, rows, mask)
