import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from spacy_pel.kb import Entity
from spacy_pel.models.encoder import BiEncoder, EncoderConfig, Mention, batch_sizes
from spacy_pel.models.int8_rows import int_mm_available
from spacy_pel.models.onnx_tower import OnnxTower

ENTS = [Entity("D1", "lithium carbonate", ["Li2CO3"], ["Chemical"]), Entity("D2", "flutter", [], ["Disease"], "x")]


def test_save_load_roundtrip(tiny_bert, tmp_path):
    enc = BiEncoder.from_pretrained(str(tiny_bert))
    m = [Mention("Lithium carbonate toxicity in a newborn.", 0, 17)]
    before = enc.encode_entities(ENTS), enc.encode_mentions(m)
    enc.save(tmp_path / "enc")
    assert (tmp_path / "enc" / "entity" / "model.safetensors").exists()
    assert not list((tmp_path / "enc").rglob("*.bin")) and not list((tmp_path / "enc").rglob("*.pt"))
    again = BiEncoder.from_pretrained(tmp_path / "enc")
    assert again.fingerprint() == enc.fingerprint()
    np.testing.assert_allclose(again.encode_entities(ENTS), before[0], atol=1e-6)
    np.testing.assert_allclose(again.encode_mentions(m), before[1], atol=1e-6)


def test_fingerprint_tracks_entity_weights(tiny_bert):
    enc = BiEncoder.from_pretrained(str(tiny_bert))
    fp = enc.fingerprint()
    with torch.no_grad():
        enc.mention_model.embeddings.word_embeddings.weight[5] += 1.0
    assert enc.fingerprint() == fp  # the mention side does not change entity vectors
    with torch.no_grad():
        enc.entity_model.embeddings.word_embeddings.weight[5] += 1.0
    assert enc.fingerprint() != fp


def test_entity_input_layout(tiny_bert):
    enc = BiEncoder.from_pretrained(str(tiny_bert), entity_max_length=16)
    tok = enc.tokenizer
    long = Entity("D9", "aspirin", [f"synonym{i}" for i in range(50)], ["Chemical"])
    (ids,) = enc.entity_inputs([long])
    assert len(ids) == 16 and ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert ids.count(tok.sep_token_id) == 3
    assert tok.decode(ids[1 : ids.index(tok.sep_token_id)]) == "aspirin"


def test_mention_input_markers_and_context(tiny_bert):
    enc = BiEncoder.from_pretrained(str(tiny_bert), mention_max_length=16)
    text = " ".join(f"w{i}" for i in range(40)) + " lithium " + " ".join(f"v{i}" for i in range(40))
    start = text.index("lithium")
    ((ids, (a, b)),) = enc.mention_inputs([Mention(text, start, start + 7)])
    assert len(ids) == 16
    assert ids[a] == enc.marker_ids[0] and ids[b] == enc.marker_ids[1]
    assert enc.tokenizer.decode(ids[a + 1 : b]) == "lithium"
    left, right = a - 1, len(ids) - 2 - b
    assert abs(left - right) <= 1  # the context budget is split evenly
    # at the very start of a text all the budget goes to the right
    ((ids, (a, b)),) = enc.mention_inputs([Mention(text, 0, 2)])
    assert a == 1 and len(ids) == 16


def test_long_documents_and_bad_offsets(tiny_bert):
    enc = BiEncoder.from_pretrained(str(tiny_bert))
    text = "lithium " * 2000  # ≫ 512 word pieces
    vecs = enc.encode_mentions([Mention(text, 0, 7), Mention(text, len(text) - 8, len(text) - 1)])
    assert vecs.shape == (2, enc.dim) and np.isfinite(vecs).all()
    with pytest.raises(ValueError, match="outside a text"):
        enc.mention_inputs([Mention("short", 2, 99)])


def test_batching_does_not_change_vectors(tiny_bert):
    enc = BiEncoder.from_pretrained(str(tiny_bert))
    ents = ENTS + [Entity(f"X{i}", "word " * i, [], []) for i in range(1, 9)]
    np.testing.assert_allclose(enc.encode_entities(ents, batch_size=3), enc.encode_entities(ents, batch_size=64), atol=1e-5)


def test_batch_sizes_cap_padded_pieces():
    lengths = [24, 20, 9, 8, 8, 7, 6, 6, 5, 4]  # longest first, as _encode sorts them
    assert batch_sizes(lengths, 4) == [4, 4, 2]
    sizes = batch_sizes(lengths, 4, max_tokens=40)
    assert sum(sizes) == len(lengths) and sizes[0] == 1  # 24 pieces: one item under 40
    starts = np.cumsum([0, *sizes[:-1]])
    assert all(lengths[a] * n <= 40 for a, n in zip(starts, sizes))  # each batch pads to its first item
    assert all(n <= 4 for n in sizes)
    assert batch_sizes([100, 3], 8, max_tokens=10) == [1, 1]  # an input longer than the cap still goes alone
    assert batch_sizes([], 8, max_tokens=10) == []


def test_name_batches_by_padded_pieces_give_the_same_vectors(tiny_bert, monkeypatch):
    from spacy_pel.retrieval.names import encode_names

    enc = BiEncoder.from_pretrained(tiny_bert)
    names = ["a very long name " * 4] + [f"drug {i}" for i in range(40)]
    widths = []
    original = BiEncoder.embed_entities
    monkeypatch.setattr(BiEncoder, "embed_entities", lambda self, seqs: widths.append((len(seqs), max(map(len, seqs)))) or original(self, seqs))
    capped = encode_names(enc, names, max_tokens=64)
    assert all(n * w <= 64 or n == 1 for n, w in widths) and len(widths) > 1
    widths.clear()
    whole = encode_names(enc, names, max_tokens=10**6)
    assert len(widths) == 1  # one batch of 41 padded to the long name
    np.testing.assert_allclose(capped, whole, atol=1e-5)


def test_config_validation():
    with pytest.raises(ValueError, match="mention_pooling"):
        EncoderConfig(mention_pooling="max")
    with pytest.raises(ValueError, match="similarity"):
        EncoderConfig(similarity="l2")


def test_precision_auto_follows_the_device(monkeypatch):
    import torch

    from spacy_pel.models import encoder as enc
    from spacy_pel.models import precision

    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
    assert precision.resolve_precision("auto", torch.device("cpu")) == "bf16"
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    assert precision.resolve_precision("auto", torch.device("cpu")) == "fp32"
    assert precision.resolve_precision("bf16", torch.device("cpu")) == "bf16"  # asked for explicitly: kept
    # the towers: the int8 paths (ONNX Runtime's, torch's int8_rows) are CPU paths, fp32 elsewhere; auto
    # picks int8_rows on a CPU with VNNI and no bf16 (block-wise int8 where torch has no int8 product),
    # never the batch-dependent int8_dynamic
    for int8 in ("int8", "int8_rows", "int8_dynamic"):
        assert precision.tower_precision(int8, torch.device("cpu")) == int8
        assert precision.tower_precision(int8, torch.device("cuda")) == "fp32"
    monkeypatch.setattr(precision, "cpu_has_vnni", lambda: False)
    monkeypatch.setattr(precision, "cpu_has_avx2", lambda: True)
    monkeypatch.setattr(precision, "int_mm_available", lambda: True)  # AVX2 alone: exact with 7-bit weights
    assert precision.tower_precision("auto", torch.device("cpu")) == "int8_rows"
    assert precision.search_precision("auto", torch.device("cpu")) == "fp32"  # no VNNI: no int8 screen
    monkeypatch.setattr(precision, "int_mm_available", lambda: False)
    assert precision.tower_precision("auto", torch.device("cpu")) == "fp32"  # torch links faster than onnx_fp32
    monkeypatch.setattr(precision, "int_mm_available", lambda: True)
    monkeypatch.setattr(precision, "cpu_has_avx2", lambda: False)  # not x86 (an ARM CPU): torch fp32
    assert precision.tower_precision("auto", torch.device("cpu")) == "fp32"
    assert precision.index_precision("auto", torch.device("cpu"), "names") == "onnx_fp32"  # no VNNI: no int8
    assert precision.tower_precision("onnx_fp32", torch.device("cpu")) == "onnx_fp32"  # asked for explicitly: kept
    assert precision.search_precision("onnx_fp32", torch.device("cpu")) == "fp32"
    assert precision.tower_precision("onnx_fp32", torch.device("cuda")) == "fp32"
    monkeypatch.setattr(precision, "cpu_has_vnni", lambda: True)
    monkeypatch.setattr(precision, "int_mm_available", lambda: True)
    assert precision.tower_precision("auto", torch.device("cpu")) == "int8_rows"
    assert precision.search_precision("auto", torch.device("cpu")) == "int8"  # and the int8 screen
    monkeypatch.setattr(precision, "int_mm_available", lambda: False)
    assert precision.tower_precision("auto", torch.device("cpu")) == "int8"
    assert precision.tower_precision("fp32", torch.device("cpu")) == "fp32"  # asked for explicitly: kept
    assert precision.resolve_precision("auto", torch.device("cpu")) == "fp32"  # training and search: no int8
    # a KB's vectors: auto never resolves to int8 (block-wise int8 entity vectors cost 0.5 pt retriever R@1);
    # without bf16 they are fp32, run by ONNX Runtime
    assert precision.index_precision("auto", torch.device("cpu")) == "onnx_fp32"
    assert precision.index_precision("auto", torch.device("cuda")) in ("fp32", "bf16")
    # name rows: int8 with VNNI (the pipeline's R@1 unchanged), onnx_fp32 without it
    assert precision.index_precision("auto", torch.device("cpu"), "names") == "int8"  # torch without _int_mm
    monkeypatch.setattr(precision, "int_mm_available", lambda: True)
    assert precision.index_precision("auto", torch.device("cpu"), "names") == "int8_rows"
    assert precision.index_precision("fp32", torch.device("cpu"), "names") == "fp32"  # asked for explicitly: kept
    with pytest.raises(ValueError, match="rows"):
        precision.index_precision("auto", torch.device("cpu"), "mentions")
    assert precision.index_precision("int8", torch.device("cpu")) == "int8"  # asked for explicitly: kept
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
    assert precision.tower_precision("auto", torch.device("cpu")) == "bf16"
    assert precision.index_precision("auto", torch.device("cpu")) == "bf16"
    assert precision.index_precision("auto", torch.device("cpu"), "names") == "bf16"
    with pytest.raises(ValueError, match="precision"):
        enc.EncoderConfig(precision="int4")


def test_bf16_vectors_stay_close_to_fp32(tiny_encoder_dir):
    """bf16 autocast (chosen by precision auto on CPUs with bf16 units) changes vectors only slightly."""
    fp32 = BiEncoder.from_pretrained(tiny_encoder_dir)
    bf16 = BiEncoder.from_pretrained(tiny_encoder_dir, precision="bf16")
    mentions = [Mention("aspirin and warfarin were given", 0, 7), Mention("atrial flutter recurred", 0, 14)]
    a, b = fp32.encode_mentions(mentions), bf16.encode_mentions(mentions)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.99


def test_onnx_fp32_vectors_equal_torch_fp32_and_training_uses_torch(tiny_encoder_dir):
    """precision onnx_fp32 (auto's for encoding a KB on a CPU without bf16):
    ONNX Runtime runs an unquantised copy, whose vectors are the torch tower's to float rounding; with a
    gradient the torch tower runs."""
    fp32 = BiEncoder.from_pretrained(tiny_encoder_dir)
    onnx = BiEncoder.from_pretrained(tiny_encoder_dir, precision="onnx_fp32")
    mentions = [Mention("aspirin and warfarin were given", 0, 7), Mention("atrial flutter recurred", 0, 14)]
    entities = [Entity("D1", "aspirin", ["acetylsalicylic acid"], ["Chemical"]), Entity("D2", "atrial flutter")]
    np.testing.assert_allclose(fp32.encode_mentions(mentions), onnx.encode_mentions(mentions), atol=1e-5)
    np.testing.assert_allclose(fp32.encode_entities(entities), onnx.encode_entities(entities), atol=1e-5)
    with torch.inference_mode():
        tower = onnx.runtime_model(onnx.entity_model)
        assert isinstance(tower, OnnxTower) and fp32.runtime_model(fp32.entity_model) is fp32.entity_model
    assert onnx.runtime_model(onnx.entity_model) is onnx.entity_model  # a gradient is wanted here
    assert onnx.fingerprint() == fp32.fingerprint()


@pytest.mark.parametrize("precision", ["int8", "int8_rows", "int8_dynamic"])
def test_int8_vectors_stay_close_to_fp32_and_training_uses_fp32(tiny_encoder_dir, tmp_path, precision):
    """precision int8: inference through int8 copies of the towers; what is trained and saved is fp32."""
    if precision == "int8_rows" and not int_mm_available():
        pytest.skip("no exact int8 matrix product on this CPU (no VNNI): int8_rows runs block-wise int8 here")
    fp32 = BiEncoder.from_pretrained(tiny_encoder_dir)
    int8 = BiEncoder.from_pretrained(tiny_encoder_dir, precision=precision)
    mentions = [Mention("aspirin and warfarin were given", 0, 7), Mention("atrial flutter recurred", 0, 14)]
    entities = [Entity("D1", "aspirin", ["acetylsalicylic acid"], ["Chemical"]), Entity("D2", "atrial flutter")]
    for a, b in [(fp32.encode_mentions(mentions), int8.encode_mentions(mentions)),
                 (fp32.encode_entities(entities), int8.encode_entities(entities))]:
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert cos.min() > 0.98 and not np.allclose(a, b, atol=1e-6)  # close, and really int8
    assert int8.fingerprint() == fp32.fingerprint()  # a KB built either way serves both
    assert not any("quantized" in type(m).__module__ for m in int8.modules())  # int8 copies are not submodules
    with torch.inference_mode():
        tower = int8.runtime_model(int8.mention_model)
        assert isinstance(tower, torch.nn.Module if precision == "int8_rows" else OnnxTower)
        assert tower is not int8.mention_model and int8.runtime_model(int8.mention_model) is tower  # made once
    ids, mask, pool = int8._collate([int8.mention_inputs(mentions)[0][0]])
    out = int8.mention_model(input_ids=ids, attention_mask=mask).last_hidden_state.sum()
    out.backward()  # the trained tower is the fp32 one, with gradients
    assert int8.mention_model.embeddings.word_embeddings.weight.grad is not None
    before = int8.encode_mentions(mentions)
    with torch.no_grad():  # an optimiser step: the next inference re-quantises the changed weights
        for p in int8.mention_model.parameters():
            p.mul_(1.5)
    with torch.inference_mode():
        assert int8.runtime_model(int8.mention_model) is not tower
    assert not np.allclose(int8.encode_mentions(mentions), before, atol=1e-3)
    int8.save(tmp_path / "enc")
    again = BiEncoder.from_pretrained(tmp_path / "enc")
    assert again.config.precision == precision
    np.testing.assert_allclose(again.encode_mentions(mentions), int8.encode_mentions(mentions), atol=1e-6)


def test_identical_mention_inputs_are_encoded_once(tiny_bert, monkeypatch):
    enc = BiEncoder.from_pretrained(tiny_bert)
    text = "aspirin and warfarin were given"
    mentions = [Mention(text, 0, 7), Mention(text, 12, 20), Mention(text, 0, 7), Mention("aspirin alone", 0, 7)]
    one_by_one = np.stack([enc.encode_mentions([m])[0] for m in mentions])
    seen = []
    original = BiEncoder.embed_mentions
    monkeypatch.setattr(BiEncoder, "embed_mentions", lambda self, inputs, **kw: seen.append(len(inputs)) or original(self, inputs, **kw))
    together = enc.encode_mentions(mentions)
    assert sum(seen) == 3  # the repeated (text, context) input went through the model once
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)


def test_a_saved_encoder_is_read_from_safetensors_only(tiny_encoder_dir, tmp_path):
    """A saved encoder folder whose weights were swapped for a pickle (pytorch_model.bin) is refused,
    not unpickled."""
    import shutil

    folder = tmp_path / "enc"
    shutil.copytree(tiny_encoder_dir, folder)
    weights = load_file(folder / "mention" / "model.safetensors")
    (folder / "mention" / "model.safetensors").unlink()
    torch.save(weights, folder / "mention" / "pytorch_model.bin")
    with pytest.raises(OSError, match="no model.safetensors.*never read"):
        BiEncoder.from_pretrained(folder)
    assert BiEncoder.from_pretrained(tiny_encoder_dir).dim > 0
