"""Block-wise int8 (precision ``int8``): weights packed as ONNX Runtime reads them, products close to
fp32's, and — what distinguishes it from ``int8_dynamic`` — a mention's vector does not depend on the
mentions batched with it."""
import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from spacy_pel.models.encoder import BiEncoder, Mention
from spacy_pel.models.int8_blockwise import pack_int8_blocks, quantize_blockwise, unpack_int8_blocks


@pytest.mark.parametrize("k,n,block", [(384, 7, 128), (100, 3, 32), (16, 5, 128)])
def test_packing_round_trips_within_half_a_step(k, n, block):
    w = np.random.default_rng(k).standard_normal((k, n)).astype(np.float32)
    w[:, 0] = 0.0  # an all-zero column: scale 0 must not divide by zero
    packed, scales = pack_int8_blocks(w, block)
    blocks = -(-k // block)
    assert packed.shape == (n, blocks, block) and packed.dtype == np.uint8 and scales.shape == (n * blocks,)
    back = unpack_int8_blocks(packed, scales, k)
    step = np.repeat(np.abs(scales.reshape(n, blocks)), block, axis=1)[:, :k].T
    assert np.all(np.abs(back - w) <= step / 2 + 1e-7)
    assert np.array_equal(back[:, 0], np.zeros(k))
    # a transposed packing (rows for columns) would not round-trip
    assert not np.allclose(unpack_int8_blocks(packed[::-1], scales, k), w, atol=0.05)


def _matmul_model(w: np.ndarray) -> onnx.ModelProto:
    k, n = w.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", n])],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_quantized_matmul_is_close_to_fp32_and_rows_are_independent():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 48)).astype(np.float32) / 16
    model = quantize_blockwise(_matmul_model(w))
    assert [node.op_type for node in model.graph.node] == ["MatMulNBits"]
    assert "w" not in {t.name for t in model.graph.initializer}  # the fp32 weight is dropped
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((6, 256)).astype(np.float32)
    x[3] *= 50  # one row with a far larger range: under a per-tensor scale the others would lose precision
    y = session.run(None, {"x": x})[0]
    exact = x @ w
    cos = (y * exact).sum(1) / np.linalg.norm(y, axis=1) / np.linalg.norm(exact, axis=1)
    assert cos.min() > 0.999
    alone = np.concatenate([session.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))])
    np.testing.assert_allclose(alone, y, atol=1e-4)  # float sums in another order, no more


def test_int8_vectors_do_not_depend_on_the_batch_but_int8_dynamic_ones_do(tiny_encoder_dir):
    mentions = [Mention("aspirin and warfarin were given after the operation", 0, 7),
                Mention("atrial flutter recurred", 0, 14),
                Mention("Li2CO3 " * 20 + "was stopped", 0, 6)]  # long and wide-ranging: changes a batch's scale
    moved = {}
    for precision in ("int8", "int8_dynamic"):
        enc = BiEncoder.from_pretrained(tiny_encoder_dir, precision=precision)
        together = enc.encode_mentions(mentions)
        alone = np.concatenate([enc.encode_mentions([m]) for m in mentions])
        moved[precision] = float(np.abs(together - alone).max())
    assert moved["int8"] < 1e-6  # fp32's own reordering noise is ~3e-8 here
    assert moved["int8_dynamic"] > 1e-5  # ~5e-5 here: the batch's widest activations set everyone's scale


def test_auto_links_in_int8_on_a_vnni_cpu_without_bf16_and_encodes_entity_rows_in_fp32(tiny_encoder_dir, monkeypatch):
    """There the towers link through torch's int8 copies (``int8_rows``), a KB's entity rows are encoded
    in fp32, by ONNX Runtime (``onnx_fp32``), its name rows in block-wise int8 (the pipeline's R@1
    unchanged, ~1.36× faster)."""
    import torch

    from spacy_pel.models import precision
    from spacy_pel.models.int8_rows import RowInt8Linear, int_mm_available
    from spacy_pel.models.onnx_tower import OnnxTower
    from spacy_pel.retrieval.build import load_encoder

    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    monkeypatch.setattr(precision, "cpu_has_vnni", lambda: True)
    linking = BiEncoder.from_pretrained(tiny_encoder_dir, precision="auto")
    with torch.inference_mode():
        tower = linking.runtime_model(linking.mention_model)
    if int_mm_available():
        assert linking.resolved_precision == "int8_rows" and any(isinstance(m, RowInt8Linear) for m in tower.modules())
    else:
        assert isinstance(tower, OnnxTower)
    building = load_encoder(str(tiny_encoder_dir), "auto", "cpu", rows="entities")
    assert building.config.precision == "onnx_fp32"
    with torch.inference_mode():
        tower = building.runtime_model(building.entity_model)
    assert isinstance(tower, OnnxTower) and tower.quantization == "none"
    building = load_encoder(str(tiny_encoder_dir), "auto", "cpu", rows="names")
    with torch.inference_mode():
        tower = building.runtime_model(building.entity_model)
    if int_mm_available():  # name rows: torch's int8 products
        assert building.config.precision == "int8_rows" and any(isinstance(m, RowInt8Linear) for m in tower.modules())
    else:
        assert building.config.precision == "int8" and isinstance(tower, OnnxTower) and tower.quantization == "blockwise"


def test_build_names_encodes_in_int8_on_a_vnni_cpu_without_bf16(kb_file, tiny_encoder_dir, tmp_path, monkeypatch):
    """``build-kb`` and ``build-names`` with ``auto`` there: the reports say onnx_fp32 and int8_rows (as
    resolved, not "auto"; block-wise int8 where torch has no int8 product), and the name vectors are the
    int8 tower's."""
    from spacy_pel.models import precision
    from spacy_pel.models.int8_rows import int_mm_available
    from spacy_pel.retrieval.build import build_kb
    from spacy_pel.retrieval.names import NameIndex, build_names

    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    monkeypatch.setattr(precision, "cpu_has_vnni", lambda: True)
    kb_dir = tmp_path / "kb"
    assert build_kb(kb_file, kb_dir, format="jsonl", encoder=str(tiny_encoder_dir), progress=False)["precision"] == "onnx_fp32"
    report = build_names(kb_dir, tmp_path / "names", progress=False)
    assert report["precision"] == ("int8_rows" if int_mm_available() else "int8")
    auto = NameIndex.from_disk(tmp_path / "names").searcher.matrix.float().numpy()
    fp32 = build_names(kb_dir, tmp_path / "fp32", precision="fp32", progress=False)
    assert fp32["precision"] == "fp32"
    exact = NameIndex.from_disk(tmp_path / "fp32").searcher.matrix.float().numpy()
    assert auto.shape == exact.shape and not np.array_equal(auto, exact)  # int8 products: close, not equal
    assert (auto * exact).sum(1).min() > 0.98


def test_switching_int8_kinds_keeps_one_copy_of_each_tower(tiny_encoder_dir):
    enc = BiEncoder.from_pretrained(tiny_encoder_dir, precision="int8")
    mention = [Mention("atrial flutter recurred", 0, 14)]
    blockwise = enc.encode_mentions(mention)
    enc.config.precision = "int8_dynamic"
    enc.encode_mentions(mention)
    threads = torch.get_num_threads()  # a copy per thread setting: ONNX Runtime's session takes torch's
    assert [key[1] for key in enc._runtime if key[0] == id(enc.mention_model)] == [f"dynamic@{threads}"]
    enc.config.precision = "int8"
    np.testing.assert_allclose(enc.encode_mentions(mention), blockwise, atol=1e-6)  # remade, the same
    assert [key[1] for key in enc._runtime if key[0] == id(enc.mention_model)] == [f"blockwise@{threads}"]
