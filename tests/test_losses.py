"""Losses (SPEC section 1): proxy-based Eq. 3/4, cross-entropy Eq. 1, masking, FGSM Eq. 5-8."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from spacy_pel.kb import Entity
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.losses import (
    LOSSES,
    ce_loss_from_scores,
    cross_entropy_loss,
    make_loss,
    proxy_loss,
    proxy_loss_from_scores,
    register_loss,
    similarity,
)
from spacy_pel.training.fgsm import FGSM, embed_perturbed, fgsm_entity_vectors


def _scores(batch: int = 4, n_neg: int = 6, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    pos = (torch.rand(batch, generator=gen, dtype=torch.float64) * 2 - 1).requires_grad_()
    neg = (torch.rand(batch, n_neg, generator=gen, dtype=torch.float64) * 2 - 1).requires_grad_()
    return pos, neg


# ---------------------------------------------------------------- proxy loss: Eq. 3 and its gradient Eq. 4
@pytest.mark.parametrize("alpha,delta", [(32.0, 0.0), (32.0, 0.2), (4.0, 0.1)])
def test_proxy_gradient_matches_eq4(alpha, delta):
    pos, neg = _scores()
    mask = torch.ones_like(neg, dtype=torch.bool)
    mask[1, 2:] = False
    mask[3, :] = False  # a row with no negatives at all
    loss = proxy_loss_from_scores(pos, neg, alpha, delta, neg_mask=mask)
    g_pos, g_neg = torch.autograd.grad(loss, [pos, neg])
    batch = pos.shape[0]
    s_pos = pos.detach() - delta
    s_neg = neg.detach() + delta
    expect_pos = -alpha * torch.exp(-alpha * s_pos) / (1 + torch.exp(-alpha * s_pos))
    exp_neg = torch.exp(alpha * s_neg) * mask
    expect_neg = alpha * exp_neg / (1 + exp_neg.sum(1, keepdim=True))
    # the loss is a batch mean, so each mention's gradient is divided by B
    torch.testing.assert_close(g_pos * batch, expect_pos, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(g_neg * batch, expect_neg, rtol=1e-9, atol=1e-9)
    # and the value is Eq. 3
    value = torch.log1p(torch.exp(-alpha * s_pos)) + torch.log1p(exp_neg.sum(1))
    torch.testing.assert_close(loss.detach(), value.mean())


def test_proxy_loss_is_stable_for_large_scores():
    pos = torch.tensor([-1.0, 1.0])
    neg = torch.tensor([[1.0, 0.9], [-1.0, -1.0]])
    loss = proxy_loss_from_scores(pos, neg, alpha=1e4, delta=0.0)
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, torch.tensor((1e4 + 1e4) / 2))


def test_proxy_loss_uses_cosine():
    gen = torch.Generator().manual_seed(1)
    m, pos, neg = torch.randn(3, 8, generator=gen), torch.randn(3, 8, generator=gen), torch.randn(3, 5, 8, generator=gen)
    scaled = proxy_loss(m * 7, pos * 3, neg * 0.2)
    plain = proxy_loss_from_scores(similarity(m, pos, "cosine"), similarity(m, neg, "cosine"), 32.0, 0.0)
    torch.testing.assert_close(scaled, plain)
    torch.testing.assert_close(similarity(m, neg, "cosine"), F.cosine_similarity(m[:, None], neg, dim=-1))


# ---------------------------------------------------------------- cross-entropy: Eq. 1
def test_ce_equals_torch_cross_entropy():
    gen = torch.Generator().manual_seed(2)
    m, pos, neg = torch.randn(4, 8, generator=gen), torch.randn(4, 8, generator=gen), torch.randn(4, 6, 8, generator=gen)
    logits = torch.cat([(m * pos).sum(-1, keepdim=True), torch.einsum("bd,bnd->bn", m, neg)], dim=1)
    expect = F.cross_entropy(logits, torch.zeros(4, dtype=torch.long))
    torch.testing.assert_close(cross_entropy_loss(m, pos, neg), expect)
    torch.testing.assert_close(make_loss("ce")(m, pos, neg), expect)


def test_scaled_cosine_ce_is_ce_on_scaled_cosines():
    gen = torch.Generator().manual_seed(6)
    m, pos, neg = torch.randn(4, 8, generator=gen), torch.randn(4, 8, generator=gen), torch.randn(4, 6, 8, generator=gen)
    loss = make_loss("ce_cosine", scale=10)
    assert loss.kind == "cosine"
    logits = 10 * torch.cat([F.cosine_similarity(m, pos, dim=-1)[:, None], F.cosine_similarity(m[:, None], neg, dim=-1)], dim=1)
    torch.testing.assert_close(loss(m * 3, pos, neg), F.cross_entropy(logits, torch.zeros(4, dtype=torch.long)))


# ---------------------------------------------------------------- masking
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_masked_negatives_change_nothing(name):
    loss_fn = make_loss(name)
    pos, neg = _scores(seed=3)
    mask = torch.rand(neg.shape, generator=torch.Generator().manual_seed(4)) > 0.4
    mask[0, 0] = False
    loss = loss_fn.from_scores(pos, neg, mask)
    g_pos, g_neg = torch.autograd.grad(loss, [pos, neg])
    moved = neg.detach().clone()
    moved[~mask] += 5.0  # masked scores jump far; nothing may notice
    moved.requires_grad_()
    loss2 = loss_fn.from_scores(pos, moved, mask)
    g_pos2, g_neg2 = torch.autograd.grad(loss2, [pos, moved])
    torch.testing.assert_close(loss2, loss)
    torch.testing.assert_close(g_pos2, g_pos)
    torch.testing.assert_close(g_neg2, g_neg)
    assert torch.all(g_neg[~mask] == 0)
    # masking is the same as leaving those negatives out
    keep = mask[0]
    alone = loss_fn.from_scores(pos[:1], neg[:1, keep])
    torch.testing.assert_close(loss_fn.from_scores(pos[:1], neg[:1], mask[:1]), alone)


def test_make_loss_interface():
    proxy = make_loss("proxy", delta=0.1)
    assert proxy.kind == "cosine" and proxy.settings == {"alpha": 32.0, "delta": 0.1}
    assert make_loss("ce").kind == "dot"
    gen = torch.Generator().manual_seed(5)
    m, pos, neg = torch.randn(2, 4, generator=gen), torch.randn(2, 4, generator=gen), torch.randn(2, 3, 4, generator=gen)
    torch.testing.assert_close(proxy(m, pos, neg), proxy_loss(m, pos, neg, delta=0.1))
    with pytest.raises(ValueError, match="unknown loss"):
        make_loss("triplet")
    with pytest.raises(ValueError, match="no setting"):
        make_loss("ce", alpha=3)
    with pytest.raises(ValueError, match="bool"):
        ce_loss_from_scores(pos[:, 0], neg[..., 0], neg_mask=torch.ones(2, 3))


def test_a_registered_loss_is_chosen_by_name():
    @register_loss("test_hinge", "dot", margin=0.5)
    def hinge(pos_s, neg_s, neg_mask=None, margin=0.5):
        neg_s = neg_s if neg_mask is None else neg_s.masked_fill(~neg_mask, float("-inf"))
        return torch.relu(margin - pos_s + neg_s.max(dim=1).values).mean()

    try:
        loss = make_loss("test_hinge", margin=2)
        assert loss.kind == "dot" and loss.settings == {"margin": 2.0}
        m, pos, neg = torch.ones(1, 2), torch.tensor([[1.0, 0.0]]), torch.tensor([[[0.0, 1.0], [0.0, 0.0]]])
        assert float(loss(m, pos, neg)) == 2.0  # relu(2 - 1 + 1)
        with pytest.raises(ValueError, match="no setting"):
            make_loss("test_hinge", alpha=1)
    finally:
        del LOSSES["test_hinge"]
    with pytest.raises(ValueError, match="similarity kind"):
        register_loss("bad", "euclid")


# ---------------------------------------------------------------- FGSM: Eq. 5-8
ENTS = [
    Entity("D1", "lithium carbonate", ["Li2CO3"], ["Chemical"]),
    Entity("D2", "flutter", [], ["Disease"], "x"),
    Entity("D3", "tricuspid regurgitation", ["TR", "tricuspid insufficiency"], ["Disease"], "a leaking heart valve"),
    Entity("D4", "aspirin", [], ["Chemical"]),
    Entity("D5", "warfarin", ["coumadin"], ["Chemical"]),
]
EPS = 0.01


@pytest.fixture
def encoder(tiny_bert):
    enc = BiEncoder.from_pretrained(str(tiny_bert))
    enc.eval()  # no dropout: both passes see the same function
    return enc


def _batch(encoder):
    seqs = encoder.entity_inputs(ENTS)
    assert len({len(s) for s in seqs}) > 2  # padding happens
    pos = [seqs[0], seqs[1]]
    neg = [[seqs[2], seqs[3], seqs[4]], [seqs[4], seqs[0], seqs[2]]]
    mentions = torch.randn(2, encoder.dim, generator=torch.Generator().manual_seed(6))
    return mentions, pos, neg


def _first_layer_inputs(encoder, store):
    """Capture what enters the first transformer layer (the composite input embedding)."""

    def hook(module, args, kwargs):
        store.append((args[0] if args else kwargs["hidden_states"]).detach().clone())

    return encoder.entity_model.encoder.layer[0].register_forward_pre_hook(hook, with_kwargs=True)


def _reference_grad(encoder, target, seqs):
    """∇_z Σ s(m, e) by a separate route: a hook that adds a zero leaf to the embedding output."""
    leaf = {}

    def hook(module, args, output):
        leaf["z"] = torch.zeros_like(output, requires_grad=True)
        return output + leaf["z"]

    handle = encoder.entity_model.embeddings.register_forward_hook(hook)
    try:
        vecs = encoder.embed(encoder.entity_model, seqs)
    finally:
        handle.remove()
    (grad,) = torch.autograd.grad(similarity(target, vecs, "cosine").sum(), leaf["z"])
    return grad


def test_fgsm_moves_each_input_embedding_by_eps_in_the_right_direction(encoder):
    mentions, pos, neg = _batch(encoder)
    seqs = pos + [s for row in neg for s in row]
    targets = torch.cat([mentions, mentions.repeat_interleave(3, dim=0)])
    directions = torch.tensor([-1.0, -1.0] + [1.0] * 6)
    store = []
    handle = _first_layer_inputs(encoder, store)
    try:
        pos_adv, neg_adv = fgsm_entity_vectors(encoder, mentions, pos, neg, epsilon=EPS)
    finally:
        handle.remove()
    assert pos_adv.shape == (2, encoder.dim) and neg_adv.shape == (2, 3, encoder.dim)
    clean, perturbed = store  # the gradient pass (zero perturbation) and the adversarial pass
    moved = perturbed - clean
    lengths = torch.tensor([len(s) for s in seqs])
    real = torch.arange(clean.shape[1])[None, :] < lengths[:, None]
    torch.testing.assert_close(moved[real].abs(), torch.full_like(moved[real], EPS), rtol=0, atol=1e-6)
    assert torch.all(moved[~real] == 0)  # padding untouched
    grad = _reference_grad(encoder, targets, seqs)
    expect_sign = directions.view(-1, 1, 1) * grad.sign()
    assert torch.equal(moved.sign()[real], expect_sign[real])
    # the effect: positives become less similar to their mention, negatives more
    with torch.no_grad():
        clean_pos = encoder.embed_entities(pos)
        clean_neg = encoder.embed_entities([s for row in neg for s in row]).view(2, 3, -1)
        assert torch.all(similarity(mentions, pos_adv, "cosine") < similarity(mentions, clean_pos, "cosine"))
        assert torch.all(similarity(mentions, neg_adv, "cosine") > similarity(mentions, clean_neg, "cosine"))


def test_fgsm_padding_does_not_matter(encoder):
    mentions, pos, neg = _batch(encoder)
    pos_adv, neg_adv = fgsm_entity_vectors(encoder, mentions, pos, neg, epsilon=EPS)
    for i in range(2):
        alone_pos, alone_neg = fgsm_entity_vectors(encoder, mentions[i : i + 1], pos[i : i + 1], neg[i : i + 1], EPS)
        torch.testing.assert_close(pos_adv[i : i + 1], alone_pos, rtol=0, atol=2e-5)
        torch.testing.assert_close(neg_adv[i : i + 1], alone_neg, rtol=0, atol=2e-5)


def test_fgsm_vectors_carry_the_graph_and_hooks_are_removed(encoder):
    mentions, pos, neg = _batch(encoder)
    mentions.requires_grad_()
    embeddings = encoder.entity_model.embeddings
    pos_adv, neg_adv = fgsm_entity_vectors(encoder, mentions, pos, neg, epsilon=EPS)
    assert not embeddings._forward_hooks
    # the sign pass leaves no gradient behind on the weights or on the mentions
    assert all(p.grad is None for p in encoder.entity_model.parameters())
    assert mentions.grad is None
    make_loss("proxy")(mentions, pos_adv, neg_adv).backward()
    grads = [p.grad for p in encoder.entity_model.parameters()]
    assert all(g is not None for g in grads[:3]) and any(float(g.abs().sum()) > 0 for g in grads if g is not None)
    assert embeddings.word_embeddings.weight.grad is not None
    assert mentions.grad is not None  # the caller's mention graph is intact for the adversarial term
    # a failing forward still removes the hook
    with pytest.raises(RuntimeError, match="does not match"):
        embed_perturbed(encoder, pos, torch.zeros(1, 1, encoder.dim))
    assert not embeddings._forward_hooks


def test_fgsm_wrapper_adds_lambda_times_the_loss_on_adversarial_entities(encoder):
    """FGSM wraps any loss: clean + λ·L(m, P_adv), P_adv from fgsm_entity_vectors on the KB rows given."""
    mentions, _, _ = _batch(encoder)
    positives, rows = [0, 1], np.array([[2, 3, 4], [4, 0, 2]])
    mask = torch.tensor([[True, False, True], [True, True, True]])
    for name in ("proxy", "ce"):
        loss = make_loss(name)
        clean = torch.tensor(0.25)
        wrapped = FGSM(loss, encoder, ENTS, epsilon=EPS, weight=0.5, negatives=2)
        got = wrapped(clean, mentions, positives, rows, mask)
        seqs = encoder.entity_inputs(ENTS)
        pos_adv, neg_adv = fgsm_entity_vectors(encoder, mentions, [seqs[0], seqs[1]],
                                               [[seqs[2], seqs[3]], [seqs[4], seqs[0]]], epsilon=EPS, kind=loss.kind)
        torch.testing.assert_close(got, clean + 0.5 * loss(mentions, pos_adv, neg_adv, mask[:, :2]))
    # with ε = 0 the adversarial copies are the clean entities: the wrapped loss is (1 + λ)·L
    loss = make_loss("proxy")
    with torch.no_grad():
        seqs = encoder.entity_inputs(ENTS)
        vec = encoder.embed_entities(seqs)
    clean = loss(mentions, vec[positives], vec[torch.from_numpy(rows)], mask)
    got = FGSM(loss, encoder, ENTS, epsilon=0.0, weight=1.0)(clean, mentions, positives, rows, mask)
    torch.testing.assert_close(got, 2 * clean, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        FGSM(loss, encoder, ENTS, epsilon=-1.0)
