"""Torch int8 towers (precision ``int8_rows``): int8 weights per output channel, activations quantised per
row, products close to fp32's, a mention's vector independent of its batch, the trained tower untouched."""
import numpy as np
import pytest
import torch

from spacy_pel.models.encoder import BiEncoder, Mention
from spacy_pel.models.int8_rows import RowInt8Linear, RowQuantiser, int_mm_available, int_mm_weight_limit, quantize_rows
from spacy_pel.models.precision import tower_precision

needs_int_mm = pytest.mark.skipif(not int_mm_available(), reason="no exact int8 matrix product on this CPU (neither VNNI nor AVX2)")


@needs_int_mm
def test_row_int8_linear_is_close_to_fp32_and_each_row_is_its_own():
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 40)
    x = torch.randn(2, 5, 96)
    x[1, 2] *= 80  # one row with a far larger range: under a per-batch scale the others would lose precision
    x[0, 1] = 0.0  # an all-zero row: its scale must not divide by zero
    quantised = RowInt8Linear(linear, int_mm_weight_limit())
    with torch.no_grad():
        exact, y = linear(x), quantised(x)
        alone = torch.stack([torch.stack([quantised(x[b, t][None])[0] for t in range(5)]) for b in range(2)])
    assert y.shape == exact.shape
    cos = torch.nn.functional.cosine_similarity(y.reshape(-1, 40), exact.reshape(-1, 40), dim=1)
    assert cos.min() > (0.999 if int_mm_weight_limit() == 127 else 0.998)
    torch.testing.assert_close(y[0, 1], linear.bias.detach())  # a zero row: the bias alone
    assert torch.equal(alone, y)  # exact int32 sums and per-row scales: nothing depends on the other rows


@needs_int_mm
def test_row_int8_linear_keeps_weights_as_int8_per_output_channel():
    linear = torch.nn.Linear(8, 3, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([[1.0] * 8, [-0.5] * 8, [1000.0] + [1.0] * 7]))
    quantised = RowInt8Linear(linear, 127)
    assert quantised.weight_t.dtype == torch.int8 and quantised.weight_t.shape == (8, 3)
    # one scale per output channel: channel 2's large weight does not flatten channels 0 and 1
    assert quantised.weight_t[:, 0].tolist() == [127] * 8 and quantised.weight_t[:, 1].tolist() == [-127] * 8
    assert RowInt8Linear(linear, 64).weight_t[:, :2].unique().tolist() == [-64, 64]  # AVX2's 7-bit weights
    with torch.no_grad():
        out = RowInt8Linear(linear, int_mm_weight_limit())(torch.ones(1, 8))
    torch.testing.assert_close(out[0, :2], torch.tensor([8.0, -4.0]), rtol=1e-5, atol=1e-5)


def test_the_weight_limit_is_the_widest_range_multiplied_exactly(monkeypatch):
    """127 where full-range products are exact (VNNI), 64 where only 7-bit weights are (AVX2: u8 × s8 pairs
    summed in 16 bits), none where neither; int8_rows refuses to build without one."""
    from spacy_pel.models import int8_rows

    for exact, want in (({127, 64}, 127), ({64}, 64), (set(), 0)):
        monkeypatch.setattr(int8_rows, "_exact_at", lambda limit, exact=exact: limit in exact)
        int8_rows.int_mm_weight_limit.cache_clear()
        assert int8_rows.int_mm_weight_limit() == want and int8_rows.int_mm_available() == bool(want)
    with pytest.raises(RuntimeError, match="exact int8 matrix products"):
        quantize_rows(torch.nn.Sequential(torch.nn.Linear(4, 4)))
    int8_rows.int_mm_weight_limit.cache_clear()


def test_a_saturating_product_is_not_taken_for_exact(monkeypatch):
    """The probe itself: a product that saturates 16-bit pair sums (as AVX2's kernels do with full-range
    weights) is found inexact at 127 and exact at 64."""
    from spacy_pel.models import int8_rows

    def saturating(a, b):
        pairs = (a.long() + 128).reshape(a.shape[0], -1, 2, 1) * b.long().reshape(1, -1, 2, b.shape[1])
        return pairs.sum(2).clamp(-32768, 32767).sum(1).sub(128 * b.long().sum(0)).int()

    monkeypatch.setattr(torch, "_int_mm", saturating)
    assert not int8_rows._exact_at(127) and int8_rows._exact_at(64)


@needs_int_mm
def test_query_key_and_value_quantise_their_shared_input_once(tiny_encoder_dir):
    enc = BiEncoder.from_pretrained(tiny_encoder_dir)
    twin = quantize_rows(enc.mention_model)
    quantisers = {id(m.quantiser) for m in twin.modules() if isinstance(m, RowInt8Linear)}
    assert len(quantisers) == 1  # one per copy
    calls = []
    quantiser = next(m.quantiser for m in twin.modules() if isinstance(m, RowInt8Linear))
    original = RowQuantiser.__call__

    def counted(self, x):
        calls.append(x)
        return original(self, x)

    ids = torch.tensor([[101, 2000, 2001, 102]])
    with torch.inference_mode():
        RowQuantiser.__call__ = counted
        try:
            out = twin(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        finally:
            RowQuantiser.__call__ = original
        quantiser.forget()
        fresh = twin(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
    layers = enc.mention_model.config.num_hidden_layers
    linears = sum(isinstance(m, RowInt8Linear) for m in twin.modules())  # 6 a layer, and the pooler's
    assert len(calls) == linears and len({id(x) for x in calls}) == linears - 2 * layers  # q, k, v read one tensor
    assert torch.equal(out, fresh)


def test_the_quantiser_requantises_an_input_changed_in_place():
    quantiser = RowQuantiser()
    x = torch.randn(3, 8)
    first = quantiser(x)[0].clone()
    assert quantiser(x)[0] is quantiser(x)[0]  # the same tensor again: remembered
    x.mul_(-1)  # changed in place: torch's version counter moved
    assert torch.equal(quantiser(x)[0], -first)


@needs_int_mm
def test_quantize_rows_replaces_every_linear_of_a_copy(tiny_encoder_dir):
    enc = BiEncoder.from_pretrained(tiny_encoder_dir)
    before = {k: v.clone() for k, v in enc.mention_model.state_dict().items()}
    twin = quantize_rows(enc.mention_model)
    assert not any(isinstance(m, torch.nn.Linear) for m in twin.modules())
    assert sum(isinstance(m, RowInt8Linear) for m in twin.modules()) >= 6 * enc.mention_model.config.num_hidden_layers
    assert any(isinstance(m, torch.nn.Linear) for m in enc.mention_model.modules())  # the trained tower stays fp32
    after = enc.mention_model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def _mentions():
    return [Mention("aspirin and warfarin were given after the operation", 0, 7),
            Mention("atrial flutter recurred", 0, 14),
            Mention("Li2CO3 " * 20 + "was stopped", 0, 6)]  # long and wide-ranging: would change a batch's scale


@needs_int_mm
def test_int8_rows_vectors_are_close_to_fp32_and_do_not_depend_on_the_batch(tiny_encoder_dir):
    mentions = _mentions()
    fp32 = BiEncoder.from_pretrained(tiny_encoder_dir, precision="fp32").encode_mentions(mentions)
    enc = BiEncoder.from_pretrained(tiny_encoder_dir, precision="int8_rows")
    together = enc.encode_mentions(mentions)
    alone = np.concatenate([enc.encode_mentions([m]) for m in mentions])
    assert np.abs(together - alone).max() < 1e-6  # fp32's own reordering noise; int8_dynamic moves ~5e-5
    assert (together * fp32).sum(1).min() > 0.99
    assert not np.array_equal(together, fp32)  # the int8 copy ran, not the fp32 tower


@needs_int_mm
def test_int8_rows_copy_follows_the_weights_and_training_runs_the_torch_tower(tiny_encoder_dir):
    enc = BiEncoder.from_pretrained(tiny_encoder_dir, precision="int8_rows")
    mention = [Mention("atrial flutter recurred", 0, 14)]
    first = enc.encode_mentions(mention)
    with torch.inference_mode():
        copy = enc.runtime_model(enc.mention_model)
    assert copy is not enc.mention_model and any(isinstance(m, RowInt8Linear) for m in copy.modules())
    assert enc.runtime_model(enc.mention_model) is enc.mention_model  # gradients on: the tower that trains
    with torch.no_grad():
        for p in enc.mention_model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert not np.allclose(enc.encode_mentions(mention), first, atol=1e-4)  # remade from the new weights
    assert [key[1] for key in enc._runtime if key[0] == id(enc.mention_model)] == ["int8_rows"]


def test_int8_rows_is_a_cpu_path_and_falls_back_to_blockwise_int8_without_exact_int8_products(monkeypatch):
    from spacy_pel.models import precision

    monkeypatch.setattr(precision, "int_mm_available", lambda: True)
    assert tower_precision("int8_rows", torch.device("cpu")) == "int8_rows"
    assert tower_precision("int8_rows", torch.device("cuda")) == "fp32"
    monkeypatch.setattr(precision, "int_mm_available", lambda: False)  # e.g. an AVX2-only CPU
    with pytest.warns(UserWarning, match="block-wise 'int8'"):
        assert tower_precision("int8_rows", torch.device("cpu")) == "int8"
