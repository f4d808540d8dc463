"""The linker's inference precisions (fp32, bf16, int8) are config settings that survive save and load."""
import numpy as np
import pytest
import spacy
import torch

from .test_linker import linked, make_doc


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8", "int8_rows", "int8_dynamic"])
def test_precision_round_trips_with_the_pipeline(precision, kb_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "precision": precision})
    before = linked(nlp(make_doc(nlp)))
    linker = nlp.get_pipe("pel_linker")
    assert linker.encoder.config.precision == precision
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    again = loaded.get_pipe("pel_linker")
    again.ensure_loaded()
    assert again.cfg.precision == precision and again.encoder.config.precision == precision
    after = linked(loaded(make_doc(loaded)))
    assert [x[:3] for x in after] == [x[:3] for x in before]
    np.testing.assert_allclose([c[2] for x in after for c in x[3]], [c[2] for x in before for c in x[3]], atol=1e-5)


@pytest.mark.parametrize("int8", ["int8", "int8_rows"])
def test_int8_links_like_fp32_on_a_tiny_model(kb_dir, int8):
    """The int8 paths change scores a little, not which entity wins on clear cases."""
    runs, vectors = {}, {}
    for precision in ("fp32", int8):
        nlp = spacy.blank("en")
        nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "precision": precision})
        doc = nlp(make_doc(nlp))
        runs[precision] = linked(doc)
        vectors[precision] = nlp.get_pipe("pel_linker").mention_vectors([doc], [[(e.start, e.end, e.label_) for e in doc.ents]])
    top_fp32 = [x[3][0] for x in runs["fp32"]]
    top_int8 = [x[3][0] for x in runs[int8]]
    scores = np.array([[c[2] for c in x[3]] for x in runs["fp32"]])
    clear = scores[:, 0] - scores[:, 1] > 0.02  # winners by a margin int8 error cannot bridge
    assert [a[0] for a, c in zip(top_fp32, clear) if c] == [b[0] for b, c in zip(top_int8, clear) if c]
    np.testing.assert_allclose([a[2] for a in top_fp32], [b[2] for b in top_int8], atol=0.02)
    a, b = vectors["fp32"], vectors[int8]
    assert (a * b).sum(1).min() > 0.98 and not np.allclose(a, b, atol=1e-6)  # close, and really int8


@pytest.mark.parametrize("search_precision,dtype,screened", [
    ("fp32", torch.float32, False), ("bf16", torch.bfloat16, False), ("int8", torch.float16, True),
])
def test_search_precision_is_a_setting_the_kb_is_loaded_with(search_precision, dtype, screened, kb_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "precision": "fp32"})
    before = linked(nlp(make_doc(nlp)))
    nlp.to_disk(tmp_path / "p")
    # the KB saved with the pipeline, read with the precision given at load
    loaded = spacy.load(tmp_path / "p", config={"components.pel_linker.search_precision": search_precision})
    linker = loaded.get_pipe("pel_linker")
    linker.ensure_loaded()
    assert linker.index.searcher.matrix.dtype == dtype and linker.index.searcher.screened == screened
    after = linked(loaded(make_doc(loaded)))
    assert [x[:3] for x in after] == [x[:3] for x in before]
    # the KB read from the config's path on first use
    fresh = spacy.blank("en")
    fresh.add_pipe("pel_linker", config={"kb": str(kb_dir), "precision": "fp32", "search_precision": search_precision})
    fresh.get_pipe("pel_linker").ensure_loaded()
    assert fresh.get_pipe("pel_linker").index.searcher.matrix.dtype == dtype


def test_an_unknown_search_precision_is_refused():
    with pytest.raises(ValueError, match="search_precision"):
        spacy.blank("en").add_pipe("pel_linker", config={"search_precision": "int4"})


@pytest.mark.parametrize("precision", ["int8", "int8_rows", "onnx_fp32"])
def test_collective_vectors_run_in_the_precision_too(kb_dir, precision):
    """The one pass per document (``collective`` vectors, the span finder) runs the tower copy of the
    precision, as per-mention vectors do: before, it ran the fp32 tower whatever the setting (vectors
    bit-identical to fp32's), so ``auto`` on a CPU without bf16 ran these pipelines in fp32 unannounced."""
    collective = {"@misc": "spacy_pel.vectors.collective.v1"}
    vectors = {}
    for p in ("fp32", precision):
        nlp = spacy.blank("en")
        nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "precision": p, "vectors": collective})
        doc = nlp(make_doc(nlp))
        vectors[p] = nlp.get_pipe("pel_linker").mention_vectors([doc], [[(e.start, e.end, e.label_) for e in doc.ents]])
    a, b = vectors["fp32"], vectors[precision]
    assert (a * b).sum(1).min() > 0.98 and not np.array_equal(a, b)  # close, and not the fp32 tower's
