"""Losses over a batch of vectors with class labels (KB self-alignment, SapBERT's way).

A batch holds names of several entities; names of one entity are positives of each other, every other
name of the batch is a negative. ``x`` is ``[n, d]`` (any length: cosine similarities are computed
here), ``labels`` ``[n]`` integer entity labels; a row without another row of its label contributes
only as a negative. ``ignore`` (optional ``[n, n]`` bool) marks pairs of rows that are neither positives
nor negatives of each other (KB self-alignment: one entity's name and another's that is also its name). Every
loss is a mean over the rows that have a positive.

* ``"multi_similarity"`` -- Wang et al. (2019), as SapBERT trains with it: over the cosine matrix
  ``S``, online hard-pair mining keeps negatives with ``S_in > min_p S_ip - ε`` and positives with
  ``S_ip < max_n S_in + ε``; then
  ``L_i = (1/α) log(1 + Σ_p e^{-α(S_ip - λ)}) + (1/β) log(1 + Σ_n e^{β(S_in - λ)})``.
  Defaults α = 1, β = 60, λ = 0.5 (SapBERT's ``MultiSimilarityLoss(alpha=1, beta=60, base=0.5)``) and
  ε = 0.1 (the miner's default).
* ``"info_nce"`` -- supervised InfoNCE: ``-log`` of the softmax mass on a row's positives among all
  other rows, on ``scale`` × cosine (scale 20 = temperature 0.05).

:func:`make_pair_loss` picks one by name; :data:`PAIR_LOSSES` lists them with their defaults.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


def _pair_masks(labels: Tensor, ignore: Optional[Tensor] = None) -> tuple:
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(len(labels), dtype=torch.bool, device=labels.device)
    keep = ~eye if ignore is None else ~eye & ~ignore
    return same & keep, ~same & keep


def cosine_matrix(x: Tensor) -> Tensor:
    u = F.normalize(x.float(), dim=-1)
    return u @ u.T


def multi_similarity_loss(x: Tensor, labels: Tensor, alpha: float = 1.0, beta: float = 60.0,
                          base: float = 0.5, epsilon: float = 0.1, ignore: Optional[Tensor] = None) -> Tensor:
    """The multi-similarity loss with its online hard-pair mining (module doc)."""
    s = cosine_matrix(x)
    pos, neg = _pair_masks(labels, ignore)
    big = torch.finfo(s.dtype).max
    min_pos = torch.where(pos, s, torch.full_like(s, big)).min(1, keepdim=True).values
    max_neg = torch.where(neg, s, torch.full_like(s, -big)).max(1, keepdim=True).values
    with torch.no_grad():
        keep_neg = neg & (s + epsilon > min_pos)
        keep_pos = pos & (s - epsilon < max_neg)
    has_pos = pos.any(1)
    zero = torch.zeros_like(s)
    pos_term = torch.log1p(torch.where(keep_pos, torch.exp(-alpha * (s - base)), zero).sum(1)) / alpha
    neg_term = torch.log1p(torch.where(keep_neg, torch.exp(beta * (s - base)), zero).sum(1)) / beta
    per_row = (pos_term + neg_term)[has_pos]
    return per_row.mean() if len(per_row) else s.sum() * 0.0


def info_nce_loss(x: Tensor, labels: Tensor, scale: float = 20.0, ignore: Optional[Tensor] = None) -> Tensor:
    """Supervised InfoNCE over the batch (module doc)."""
    s = cosine_matrix(x) * scale
    pos, neg = _pair_masks(labels, ignore)
    logits = s.masked_fill(~(pos | neg), float("-inf"))
    log_all = torch.logsumexp(logits, 1)
    log_pos = torch.logsumexp(logits.masked_fill(~pos, float("-inf")), 1)
    has_pos = pos.any(1)
    per_row = (log_all - log_pos)[has_pos]
    return per_row.mean() if len(per_row) else s.sum() * 0.0


@dataclass
class PairLossSpec:
    fn: Callable[..., Tensor]
    defaults: Dict[str, float]


PAIR_LOSSES: Dict[str, PairLossSpec] = {
    "multi_similarity": PairLossSpec(multi_similarity_loss, {"alpha": 1.0, "beta": 60.0, "base": 0.5, "epsilon": 0.1}),
    "info_nce": PairLossSpec(info_nce_loss, {"scale": 20.0}),
}


def make_pair_loss(name: str, **settings: float) -> Callable[..., Tensor]:
    """The loss ``name`` with ``settings`` (keys of its defaults) fixed: ``loss(x, labels, ignore=None)``."""
    if name not in PAIR_LOSSES:
        raise ValueError(f"pair loss must be one of {', '.join(sorted(PAIR_LOSSES))}, not {name!r}")
    spec = PAIR_LOSSES[name]
    unknown = sorted(set(settings) - set(spec.defaults))
    if unknown:
        raise ValueError(f"pair loss {name!r} has no setting(s) {unknown}; known: {sorted(spec.defaults)}")
    kw = {**spec.defaults, **settings}
    return lambda x, labels, ignore=None: spec.fn(x, labels, ignore=ignore, **kw)
