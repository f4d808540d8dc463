"""The last layer computed at the pooled positions only gives the full forward's mention vectors."""
import threading

import numpy as np
import pytest
import torch

from spacy_pel.models import span_pooling
from spacy_pel.models.encoder import BiEncoder, Mention
from spacy_pel.models.span_pooling import last_layer, pooled_last_layer

TEXT = "Patients given lithium carbonate developed tricuspid regurgitation and atrial flutter after aspirin ."
MENTIONS = [Mention(TEXT, 15, 32), Mention(TEXT, 43, 66), Mention(TEXT, 71, 85), Mention("aspirin", 0, 7),
            Mention(TEXT, 92, 99)]


def full_forward(monkeypatch):
    monkeypatch.setattr(span_pooling, "last_layer", lambda model: None)


def test_pooled_last_layer_equals_the_full_forward(tiny_bert, monkeypatch):
    enc = BiEncoder.from_pretrained(tiny_bert, mention_max_length=24)
    calls = []
    real = span_pooling.hidden_before
    monkeypatch.setattr(span_pooling, "hidden_before", lambda *a: calls.append(1) or real(*a))
    fast = enc.encode_mentions(MENTIONS, batch_size=2)
    assert calls  # the fast path ran
    full_forward(monkeypatch)
    full = enc.encode_mentions(MENTIONS, batch_size=2)
    np.testing.assert_allclose(fast, full, atol=1e-5)
    assert np.abs(fast[0] - fast[1]).max() > 1e-3  # distinct mentions: not a constant that matches by accident


def test_the_fast_path_is_off_with_gradients_and_for_other_architectures(tiny_bert):
    enc = BiEncoder.from_pretrained(tiny_bert)
    ids, mask, pool = enc._collate(*zip(*enc.mention_inputs(MENTIONS[:2])))
    assert last_layer(enc.mention_model) is not None
    assert pooled_last_layer(enc.mention_model, ids, mask, pool) is None  # gradients on: training runs the full model
    with torch.inference_mode():
        assert pooled_last_layer(enc.mention_model, ids, mask, pool) is not None
        enc.mention_model.train()  # dropout on: the full forward's business
        assert pooled_last_layer(enc.mention_model, ids, mask, pool) is None
        enc.mention_model.eval()
    enc.mention_model.config.position_embedding_type = "relative_key"
    try:
        assert last_layer(enc.mention_model) is None
    finally:
        enc.mention_model.config.position_embedding_type = "absolute"
    assert last_layer(torch.nn.Linear(2, 2)) is None


@pytest.mark.parametrize("batch_size", [1, 5])
def test_pooled_positions_with_padding_and_bf16(tiny_bert, monkeypatch, batch_size):
    enc = BiEncoder.from_pretrained(tiny_bert, mention_max_length=32, precision="bf16")
    fast = enc.encode_mentions(MENTIONS, batch_size=batch_size)
    full_forward(monkeypatch)
    full = enc.encode_mentions(MENTIONS, batch_size=batch_size)
    assert np.abs(fast - full).max() < 0.05  # bf16 rounding, not another vector
    cos = (fast * full).sum(1) / np.linalg.norm(fast, axis=1) / np.linalg.norm(full, axis=1)
    assert cos.min() > 0.999


def test_another_threads_pass_through_the_layer_is_not_taken_for_this_ones(tiny_bert):
    """Defect: the hook on the shared last layer fired for any thread's pass: one pipeline linking from two
    threads took the other thread's hidden states and left it with none (KeyError: 'hidden', which spaCy
    reports as E109 'did you forget to call initialize()')."""
    enc = BiEncoder.from_pretrained(tiny_bert, mention_max_length=24)
    model, layer = enc.mention_model.eval(), last_layer(enc.mention_model)
    ids, mask, _ = enc._collate(*zip(*enc.mention_inputs(MENTIONS[:2])))
    other_ids = ids.flip(0)
    results, errors = {}, []

    def other_thread():  # a second thread's pass while this thread's hook is on the layer
        try:
            results["other"] = span_pooling.hidden_before(model, layer, other_ids, mask.flip(0))
        except Exception as err:  # noqa: BLE001 - the defect: KeyError
            errors.append(err)

    def start_other_once(module, args):
        if "started" not in results:
            results["started"] = True
            worker = threading.Thread(target=other_thread)
            worker.start()
            worker.join()

    handle = model.embeddings.register_forward_pre_hook(start_other_once)
    try:
        with torch.inference_mode():
            mine = span_pooling.hidden_before(model, layer, ids, mask)
            alone = span_pooling.hidden_before(model, layer, other_ids, mask.flip(0))
    finally:
        handle.remove()
    assert not errors, errors
    torch.testing.assert_close(results["other"], alone)
    assert not torch.equal(mine, alone)
