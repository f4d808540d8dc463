"""The FGSM regulariser of the proxy-based paper (SPEC §1, Eq. 5-8), as a wrapper around any loss.

The entity encoder's *input embeddings* (BERT's composite word + position + segment embedding, the
tensor that enters the first layer) are perturbed per token: ``z⁻_adv = z⁻ + ε·sign(∇ s(m, e⁻))`` for
each negative (more similar to its mention), ``z⁺_adv = z⁺ - ε·sign(∇ s(m, e⁺))`` for the positive
(less similar); the perturbed entities are encoded again and the training loss becomes
``L(m, P) + λ · L(m, P_adv)`` (Eq. 8).

* :class:`FGSM` -- that wrapper: give it a configured :class:`~spacy_pel.models.losses.Loss` (any
  registered one), the encoder and the KB's entities; call it with the clean loss, the mention
  vectors and the KB rows of the positives and negatives.
* :func:`fgsm_entity_vectors` -- the adversarial entity vectors themselves; :func:`fgsm_deltas`, the
  perturbations; :func:`embed_perturbed` / :func:`add_to_input_embeddings`, encoding with them.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..kb import Entity
from ..models.encoder import BiEncoder
from ..models.losses import Loss, similarity

Tensor = torch.Tensor
Transform = Optional[Callable[[Tensor], Tensor]]  # entity-side transform of the vectors (e.g. centring)


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


def embed_perturbed(encoder: BiEncoder, seqs: Sequence[List[int]], delta: Tensor) -> Tensor:
    """Entity vectors of ``seqs`` with ``delta`` added to the input embeddings (keeps the graph)."""
    model = encoder.entity_model
    with add_to_input_embeddings(model, delta):
        return encoder.embed(model, seqs)


def fgsm_deltas(
    encoder: BiEncoder,
    targets: Tensor,
    seqs: Sequence[List[int]],
    directions: Tensor,
    epsilon: float = 0.01,
    kind: str = "cosine",
    transform: Transform = None,
) -> Tensor:
    """FGSM perturbations ``[M, T, h]`` of the entity encoder's input embeddings.

    Entity ``seqs[i]`` is scored against ``targets[i]`` (a mention vector, detached here) and its
    input embedding ``z`` is moved by ``directions[i] · ε · sign(∇_z s(m, e))`` per token and
    coordinate: ``+1`` for a negative (Eq. 6: more similar), ``-1`` for a positive (Eq. 7: less
    similar); ``transform`` (if any) is applied to the entity vectors before scoring, as the loss sees
them. Padding positions get 0. The sequences are independent in one batch, so one backward
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
        if transform is not None:
            vectors = transform(vectors)
        scores = similarity(targets.detach().to(vectors.dtype), vectors, kind)
        (grad,) = torch.autograd.grad(scores.sum(), probe)
    step = directions.to(device=device, dtype=grad.dtype).view(-1, 1, 1) * epsilon
    return (step * grad.sign() * mask.unsqueeze(-1)).detach()


def fgsm_entity_vectors(
    encoder: BiEncoder,
    mention_vecs: Tensor,
    pos_seqs: Sequence[List[int]],
    neg_seqs: Sequence[Sequence[List[int]]],
    epsilon: float = 0.01,
    kind: str = "cosine",
    transform: Transform = None,
) -> Tuple[Tensor, Tensor]:
    """Adversarial entity vectors for Eq. 8: ``(pos_adv [B, d], neg_adv [B, N, d])``.

    ``mention_vecs`` ``[B, d]``; ``pos_seqs`` the B positive entities' word-piece ids; ``neg_seqs`` B
    lists of N negative entities' ids (every pair gets its own perturbation). The positive is pushed
    away from its mention (``z⁺ - ε·sign(∇ s(m,e⁺))``), each negative towards it
    (``z⁻ + ε·sign(∇ s(m,e⁻))``). The returned vectors keep their graph to the entity encoder's
    weights: ``loss = L(m, P) + λ · L(m, pos_adv, neg_adv)``. ``kind`` should be the loss's; ``transform``
    the entity-side transform the loss's entity vectors went through (returned vectors have it applied).
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
    delta = fgsm_deltas(encoder, targets, seqs, directions, epsilon=epsilon, kind=kind, transform=transform)
    vectors = embed_perturbed(encoder, seqs, delta)
    if transform is not None:
        vectors = transform(vectors)
    return vectors[:batch], vectors[batch:].reshape(batch, n_neg, vectors.shape[-1])


class FGSM:
    """``L(m, P) + λ · L(m, P_adv)`` for the configured ``loss`` (Eq. 8).

    ``epsilon`` is ε, ``weight`` is λ; ``negatives`` (0 = all) is how many of each mention's
    negatives get an adversarial copy. The perturbation follows the loss's similarity kind;
    ``transform`` is the entity-side transform of the KB's vectors (``"centred"`` entity space).
    ``mentions`` (0 = all) is how many of the batch's mentions (the first ones; batches are shuffled)
    get the adversarial term: the mean over that subset estimates the batch mean at a fraction of
    the entity-tower passes.
    """

    def __init__(self, loss: Loss, encoder: BiEncoder, entities: Sequence[Entity], epsilon: float = 0.01,
                 weight: float = 1.0, negatives: int = 0, transform: Transform = None, mentions: int = 0):
        if epsilon < 0 or negatives < 0 or mentions < 0:
            raise ValueError(f"need epsilon, negatives and mentions >= 0, got {epsilon}, {negatives} and {mentions}")
        self.loss, self.encoder, self.entities = loss, encoder, entities
        self.epsilon, self.weight, self.negatives = float(epsilon), float(weight), int(negatives)
        self.transform, self.mentions = transform, int(mentions)

    def __call__(self, clean: Tensor, m: Tensor, positives: Sequence[int], negatives: np.ndarray, neg_mask: Tensor) -> Tensor:
        """``clean`` (the loss on ``m`` and the unperturbed entities) plus λ times the loss on the
        adversarial copies of the ``positives`` (``[B]`` KB rows) and of the first ``n`` of the
        ``negatives`` (``[B, N]`` KB rows, ``neg_mask`` ``[B, N]``)."""
        n = self.negatives or negatives.shape[1]
        b = min(self.mentions or len(positives), len(positives))
        m, positives, negatives, neg_mask = m[:b], list(positives)[:b], negatives[:b], neg_mask[:b]
        enc, ents = self.encoder, self.entities
        pos_seqs = enc.entity_inputs([ents[r] for r in positives])
        neg_flat = enc.entity_inputs([ents[r] for r in negatives[:, :n].reshape(-1)])
        neg_seqs = [neg_flat[i * n : (i + 1) * n] for i in range(len(positives))]
        pos_adv, neg_adv = fgsm_entity_vectors(enc, m, pos_seqs, neg_seqs, epsilon=self.epsilon,
                                                kind=self.loss.kind, transform=self.transform)
        return clean + self.weight * self.loss(m, pos_adv, neg_adv, neg_mask[:, :n])
