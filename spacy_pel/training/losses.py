"""Training losses for the bi-encoder (SPEC section 1).

* :func:`proxy_loss` -- the proxy-based loss of Eq. 3 (cosine similarity), each entity the proxy of
  its class; positive and negative terms are decoupled, so random negatives still give gradient.
* :func:`cross_entropy_loss` -- Eq. 1 (dot product): ``-log softmax`` of the positive among
  {positive} ∪ negatives.
* ``"ce_cosine"`` -- Eq. 1 on cosine similarity scaled by ``scale`` (a fixed softmax temperature,
  as in NormSoftmax): with unit-length entity vectors and a frozen entity tower, the dot-product CE
  can only sharpen its softmax by growing the mention norm; a fixed scale does it from step one.
* :func:`make_loss` -- pick one by name (``LOSSES``); the result knows its similarity kind.
* :func:`fgsm_entity_vectors` -- the FGSM regulariser of Eq. 5-8: adversarial positive and negative
  entity vectors from perturbed entity-encoder input embeddings; add ``λ · loss(m, P_adv)``.

Shapes: ``m`` mention vectors ``[B, d]``; ``pos`` positive entity vectors ``[B, d]``; ``neg`` negative
entity vectors ``[B, N, d]``; ``neg_mask`` ``[B, N]`` bool, ``False`` = ignore that negative. Every
loss is the mean over the batch.

The encoder is only duck-typed here (``entity_model``, ``embed``, ``device_``), so this floor-1 module
does not import :mod:`spacy_pel.encoder` at run time.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from ..models.encoder import BiEncoder

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


# ---------------------------------------------------------------- losses on scores
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


def ce_loss_from_scores(pos_s: Tensor, neg_s: Tensor, neg_mask: Optional[Tensor] = None) -> Tensor:
    """Eq. 1 on similarities: ``-log softmax`` of the positive among {positive} ∪ negatives, mean."""
    _check_scores(pos_s, neg_s, neg_mask)
    logits = torch.cat([pos_s.unsqueeze(1), _masked(neg_s, neg_mask)], dim=1)
    target = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    return F.cross_entropy(logits, target)


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
class LossSpec:
    """A named loss: its score function, its similarity kind and its settings with defaults."""

    from_scores: Callable[..., Tensor]
    kind: str
    defaults: Mapping[str, float] = field(default_factory=dict)


LOSSES: Dict[str, LossSpec] = {
    "proxy": LossSpec(proxy_loss_from_scores, "cosine", {"alpha": 32.0, "delta": 0.0}),
    "ce": LossSpec(ce_loss_from_scores, "dot", {}),
    "ce_cosine": LossSpec(scaled_ce_loss_from_scores, "cosine", {"scale": 20.0}),
}


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


# ---------------------------------------------------------------- FGSM (Eq. 5-8)
@contextlib.contextmanager
def add_to_input_embeddings(model: torch.nn.Module, delta: Tensor) -> Iterator[None]:
    """While open, ``delta`` ``[M, T, h]`` is added to the output of ``model.embeddings``.

    That output is BERT's composite input embedding (word + position + token type, after its
    LayerNorm and dropout), the tensor that enters the first transformer layer. The hook is
    removed on exit, also on error.
    """

    def hook(module: torch.nn.Module, args, output: Tensor) -> Tensor:
        if output.shape != delta.shape:
            raise RuntimeError(
                f"embedding output {tuple(output.shape)} does not match the perturbation {tuple(delta.shape)}"
            )
        return output + delta.to(output.dtype)

    handle = model.embeddings.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def _token_mask(seqs: Sequence[Sequence[int]], device: torch.device) -> Tensor:
    """``[M, T]`` float: 1 on real tokens, 0 on padding (``T`` = longest sequence, as ``embed`` pads)."""
    lengths = torch.tensor([len(s) for s in seqs], device=device)
    width = int(lengths.max())
    return (torch.arange(width, device=device)[None, :] < lengths[:, None]).float()


def embed_perturbed(encoder: "BiEncoder", seqs: Sequence[List[int]], delta: Tensor) -> Tensor:
    """Entity vectors of ``seqs`` with ``delta`` added to the input embeddings (keeps the graph)."""
    model = encoder.entity_model
    with add_to_input_embeddings(model, delta):
        return encoder.embed(model, seqs)


def fgsm_deltas(
    encoder: "BiEncoder",
    targets: Tensor,
    seqs: Sequence[List[int]],
    directions: Tensor,
    epsilon: float = 0.01,
    kind: str = "cosine",
) -> Tensor:
    """FGSM perturbations ``[M, T, h]`` of the entity encoder's input embeddings.

    Entity ``seqs[i]`` is scored against ``targets[i]`` (a mention vector, detached here) and its
    input embedding ``z`` is moved by ``directions[i] · ε · sign(∇_z s(m, e))`` per token and
    coordinate: ``+1`` for a negative (Eq. 6: more similar), ``-1`` for a positive (Eq. 7: less
    similar). Padding positions get 0. The sequences are independent in one batch, so one backward
    pass of ``Σ s`` gives every pair's gradient; no gradient reaches the weights' ``.grad``.
    """
    if len(seqs) == 0:
        raise ValueError("no entity sequences to perturb")
    if targets.shape[0] != len(seqs) or directions.shape != (len(seqs),):
        raise ValueError(f"{len(seqs)} sequences but targets {tuple(targets.shape)}, directions {tuple(directions.shape)}")
    model = encoder.entity_model
    device = encoder.device_
    mask = _token_mask(seqs, device)
    hidden = int(model.config.hidden_size)
    probe = torch.zeros(mask.shape[0], mask.shape[1], hidden, device=device, requires_grad=True)
    with torch.enable_grad():
        vectors = embed_perturbed(encoder, seqs, probe)
        scores = similarity(targets.detach().to(vectors.dtype), vectors, kind)
        (grad,) = torch.autograd.grad(scores.sum(), probe)
    step = directions.to(device=device, dtype=grad.dtype).view(-1, 1, 1) * epsilon
    return (step * grad.sign() * mask.unsqueeze(-1)).detach()


def fgsm_entity_vectors(
    encoder: "BiEncoder",
    mention_vecs: Tensor,
    pos_seqs: Sequence[List[int]],
    neg_seqs: Sequence[Sequence[List[int]]],
    epsilon: float = 0.01,
    kind: str = "cosine",
) -> Tuple[Tensor, Tensor]:
    """Adversarial entity vectors for Eq. 8: ``(pos_adv [B, d], neg_adv [B, N, d])``.

    ``mention_vecs`` ``[B, d]``; ``pos_seqs`` the B positive entities' word-piece ids; ``neg_seqs`` B
    lists of N negative entities' ids (every pair gets its own perturbation). The positive is pushed
    away from its mention (``z⁺ - ε·sign(∇ s(m,e⁺))``), each negative towards it
    (``z⁻ + ε·sign(∇ s(m,e⁻))``). The returned vectors keep their graph to the entity encoder's
    weights: ``loss = L(m, P) + λ · L(m, pos_adv, neg_adv)``. ``kind`` should be the loss's.
    """
    batch = len(pos_seqs)
    if mention_vecs.dim() != 2 or mention_vecs.shape[0] != batch or len(neg_seqs) != batch:
        raise ValueError(
            f"mention vectors {tuple(mention_vecs.shape)}, {batch} positives and {len(neg_seqs)} negative lists disagree"
        )
    n_neg = len(neg_seqs[0]) if batch else 0
    if any(len(row) != n_neg for row in neg_seqs):
        raise ValueError("every mention needs the same number of negatives (mask unwanted ones in the loss)")
    if batch == 0:
        raise ValueError("empty batch")
    seqs = list(pos_seqs) + [s for row in neg_seqs for s in row]
    targets = torch.cat([mention_vecs, mention_vecs.repeat_interleave(n_neg, dim=0)]).detach()
    directions = torch.cat([-torch.ones(batch), torch.ones(batch * n_neg)])
    delta = fgsm_deltas(encoder, targets, seqs, directions, epsilon=epsilon, kind=kind)
    vectors = embed_perturbed(encoder, seqs, delta)
    return vectors[:batch], vectors[batch:].reshape(batch, n_neg, vectors.shape[-1])
