"""Training losses for the bi-encoder (SPEC section 1).

* :func:`proxy_loss` -- the proxy-based loss of Eq. 3 (cosine similarity), each entity the proxy of
  its class; positive and negative terms are decoupled, so random negatives still give gradient.
* :func:`cross_entropy_loss` -- Eq. 1 (dot product): ``-log softmax`` of the positive among
  {positive} ∪ negatives.
* ``"ce_cosine"`` -- Eq. 1 on cosine similarity scaled by ``scale`` (a fixed softmax temperature,
  as in NormSoftmax): with unit-length entity vectors and a frozen entity tower, the dot-product CE
  can only sharpen its softmax by growing the mention norm; a fixed scale does it from step one.
* :func:`make_loss` -- pick one by name (``LOSSES``, the ``[loss] name`` of a training config); the
  result knows its similarity kind. :func:`register_loss` adds a strategy of your own.

The FGSM regulariser (Eq. 5-8) wraps any of them: :mod:`spacy_pel.training.fgsm`.

Shapes: ``m`` mention vectors ``[B, d]``; ``pos`` positive entity vectors ``[B, d]``; ``neg`` negative
entity vectors ``[B, N, d]``; ``neg_mask`` ``[B, N]`` bool, ``False`` = ignore that negative. Every
loss is the mean over the batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Mapping, Optional

import torch
import torch.nn.functional as F

Tensor = torch.Tensor
SIMILARITIES = ("cosine", "dot")


# ---------------------------------------------------------------- similarity
def similarity(m: Tensor, e: Tensor, kind: str = "cosine") -> Tensor:
    """Similarity of each mention to its entity vector(s).

    ``m`` is ``[B, d]``; ``e`` is ``[B, d]`` (one entity per mention, gives ``[B]``) or ``[B, N, d]``
    (``N`` entities per mention, gives ``[B, N]``). ``kind`` is ``"cosine"`` (both sides are
    L2-normalised here, so unnormalised inputs are fine) or ``"dot"``.
    """
    if kind not in SIMILARITIES:
        raise ValueError(f"similarity kind must be one of {SIMILARITIES}, not {kind!r}")
    if m.dim() != 2:
        raise ValueError(f"mention vectors must be [B, d], got shape {tuple(m.shape)}")
    if e.dim() not in (2, 3) or e.shape[0] != m.shape[0] or e.shape[-1] != m.shape[-1]:
        raise ValueError(f"entity vectors of shape {tuple(e.shape)} do not fit mentions {tuple(m.shape)}")
    if kind == "cosine":
        m = F.normalize(m, dim=-1)
        e = F.normalize(e, dim=-1)
    if e.dim() == 2:
        return (m * e).sum(-1)
    return torch.einsum("bd,bnd->bn", m, e)


def _check_scores(pos_s: Tensor, neg_s: Tensor, neg_mask: Optional[Tensor]) -> None:
    if pos_s.dim() != 1 or neg_s.dim() != 2 or neg_s.shape[0] != pos_s.shape[0]:
        raise ValueError(
            f"scores must be positive [B] and negative [B, N], got {tuple(pos_s.shape)} and {tuple(neg_s.shape)}"
        )
    if neg_mask is not None and (neg_mask.shape != neg_s.shape or neg_mask.dtype != torch.bool):
        raise ValueError(f"neg_mask must be a bool tensor of shape {tuple(neg_s.shape)}")


def _masked(scores: Tensor, neg_mask: Optional[Tensor]) -> Tensor:
    """Masked-out negatives become ``-inf``: they add nothing and get no gradient."""
    if neg_mask is None:
        return scores
    return scores.masked_fill(~neg_mask, float("-inf"))


# ---------------------------------------------------------------- the registry of losses
@dataclass(frozen=True)
class LossSpec:
    """A named loss: its score function, its similarity kind and its settings with defaults."""

    from_scores: Callable[..., Tensor]
    kind: str
    defaults: Mapping[str, float] = field(default_factory=dict)


LOSSES: Dict[str, LossSpec] = {}


def register_loss(name: str, kind: str, **defaults: float) -> Callable:
    """Register ``fn(pos_s [B], neg_s [B, N], neg_mask=None, **settings) -> scalar`` as the loss
    ``name`` (chosen in a training config by ``[loss] name``), on similarities of ``kind`` ("cosine"
    or "dot"), with numeric ``settings`` and their ``defaults``."""
    if kind not in SIMILARITIES:
        raise ValueError(f"similarity kind must be one of {SIMILARITIES}, not {kind!r}")

    def register(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
        LOSSES[name] = LossSpec(fn, kind, dict(defaults))
        return fn

    return register


# ---------------------------------------------------------------- losses on scores
@register_loss("proxy", "cosine", alpha=32.0, delta=0.0)
def proxy_loss_from_scores(
    pos_s: Tensor, neg_s: Tensor, alpha: float = 32.0, delta: float = 0.0, neg_mask: Optional[Tensor] = None
) -> Tensor:
    """Eq. 3 on similarities: ``softplus(-α(s⁺-δ)) + log(1 + Σ exp(α(s⁻+δ)))``, mean over the batch.

    The second term is ``logsumexp([0, α(s⁻₁+δ), …])``, stable for any α. A row whose negatives are
    all masked (or ``N = 0``) has a zero negative term.
    """
    _check_scores(pos_s, neg_s, neg_mask)
    pos_term = F.softplus(-alpha * (pos_s - delta))
    neg_x = _masked(alpha * (neg_s + delta), neg_mask)
    neg_term = torch.logsumexp(torch.cat([neg_x.new_zeros(neg_x.shape[0], 1), neg_x], dim=1), dim=1)
    return (pos_term + neg_term).mean()


@register_loss("ce", "dot")
def ce_loss_from_scores(pos_s: Tensor, neg_s: Tensor, neg_mask: Optional[Tensor] = None) -> Tensor:
    """Eq. 1 on similarities: ``-log softmax`` of the positive among {positive} ∪ negatives, mean."""
    _check_scores(pos_s, neg_s, neg_mask)
    logits = torch.cat([pos_s.unsqueeze(1), _masked(neg_s, neg_mask)], dim=1)
    target = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    return F.cross_entropy(logits, target)


@register_loss("ce_cosine", "cosine", scale=20.0)
def scaled_ce_loss_from_scores(
    pos_s: Tensor, neg_s: Tensor, scale: float = 20.0, neg_mask: Optional[Tensor] = None
) -> Tensor:
    """Eq. 1 on ``scale``-times the (cosine) similarities."""
    return ce_loss_from_scores(scale * pos_s, scale * neg_s, neg_mask=neg_mask)


# ---------------------------------------------------------------- losses on vectors
def proxy_loss(
    m: Tensor,
    pos: Tensor,
    neg: Tensor,
    neg_mask: Optional[Tensor] = None,
    *,
    alpha: float = 32.0,
    delta: float = 0.0,
) -> Tensor:
    """Proxy-based loss (Eq. 3) with cosine similarity; ``α`` scale, ``δ`` margin."""
    return proxy_loss_from_scores(
        similarity(m, pos, "cosine"), similarity(m, neg, "cosine"), alpha=alpha, delta=delta, neg_mask=neg_mask
    )


def cross_entropy_loss(m: Tensor, pos: Tensor, neg: Tensor, neg_mask: Optional[Tensor] = None) -> Tensor:
    """Cross-entropy loss (Eq. 1) with dot-product similarity."""
    return ce_loss_from_scores(similarity(m, pos, "dot"), similarity(m, neg, "dot"), neg_mask=neg_mask)


# ---------------------------------------------------------------- choosing a loss by name
@dataclass(frozen=True)
class Loss:
    """A configured loss: call it as ``loss(m, pos, neg, neg_mask=None)`` for a scalar.

    ``kind`` is the similarity it uses ("cosine" or "dot"); the encoder should be trained with the
    same ``EncoderConfig.similarity`` so that retrieval scores what the loss optimised.
    """

    name: str
    kind: str
    settings: Mapping[str, float]

    def from_scores(self, pos_s: Tensor, neg_s: Tensor, neg_mask: Optional[Tensor] = None) -> Tensor:
        """The loss on precomputed similarities (``[B]`` positive, ``[B, N]`` negative)."""
        return LOSSES[self.name].from_scores(pos_s, neg_s, neg_mask=neg_mask, **self.settings)

    def scores(self, m: Tensor, e: Tensor) -> Tensor:
        """Similarities of this loss's kind (see :func:`similarity`)."""
        return similarity(m, e, self.kind)

    def __call__(self, m: Tensor, pos: Tensor, neg: Tensor, neg_mask: Optional[Tensor] = None) -> Tensor:
        return self.from_scores(self.scores(m, pos), self.scores(m, neg), neg_mask)


def make_loss(name: str, **settings: float) -> Loss:
    """The loss called ``name`` (a key of ``LOSSES``) with ``settings`` over its defaults.

    ``make_loss("proxy", alpha=32, delta=0.1)``; ``make_loss("ce")``. Unknown names or settings raise.
    """
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}")
    spec = LOSSES[name]
    unknown = sorted(set(settings) - set(spec.defaults))
    if unknown:
        allowed = sorted(spec.defaults) or "none"
        raise ValueError(f"loss {name!r} has no setting(s) {unknown}; its settings: {allowed}")
    merged = {**spec.defaults, **{k: float(v) for k, v in settings.items()}}
    return Loss(name=name, kind=spec.kind, settings=merged)
