import numpy as np
import pytest
import spacy
from spacy.tokens import Span
from spacy.training import Example

from spacy_pel.models.encoder import BiEncoder, EncoderMismatchError
from spacy_pel.retrieval.index import EntityIndex

TEXT = "Lithium carbonate toxicity caused tricuspid regurgitation and atrial flutter in a newborn"


def make_doc(nlp, text=TEXT, spans=((0, 2, "Chemical"), (4, 6, "Disease"), (7, 9, "Disease"))):
    doc = nlp.make_doc(text)
    doc.ents = [Span(doc, a, b, label=l) for a, b, l in spans]
    return doc


@pytest.fixture
def nlp(kb_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3})  # found via the entry point
    return nlp


def test_kb_ids_persist_on_fresh_ents(nlp):
    doc = nlp(make_doc(nlp))
    ids = [e.kb_id_ for e in doc.ents]  # a fresh doc.ents: ids must have stuck
    assert all(i.startswith("D") for i in ids) and len(ids) == 3
    assert [t.ent_kb_id_ for t in doc[0:2]] == [ids[0]] * 2
    for ent in doc.ents:
        cands = ent._.pel_candidates
        assert len(cands) == 3 and cands[0][0] == ent.kb_id_
        assert [c[2] for c in cands] == sorted((c[2] for c in cands), reverse=True)
    assert [e.label_ for e in doc.ents] == ["Chemical", "Disease", "Disease"]


def test_threshold_gives_nil(nlp):
    linker = nlp.get_pipe("pel_linker")
    doc = nlp(make_doc(nlp))
    top = [e._.pel_candidates[0][2] for e in doc.ents]
    linker.threshold = sorted(top)[1]  # the lowest-scoring span falls under it
    doc = nlp(make_doc(nlp))
    expected = ["NIL" if s < linker.threshold else "D" for s in top]
    assert [e.kb_id_[:1] if e.kb_id_ != "NIL" else "NIL" for e in doc.ents] == expected
    assert expected.count("NIL") == 1
    linker.threshold = 2.0  # cosine never exceeds 1
    assert {e.kb_id_ for e in nlp(make_doc(nlp)).ents} == {"NIL"}


def test_pipe_equals_call_and_edge_cases(nlp):
    long_text = " ".join(["aspirin and warfarin"] * 400)  # ≫ 512 word pieces
    docs = [
        make_doc(nlp),
        nlp.make_doc(""),
        nlp.make_doc("no entities here"),
        make_doc(nlp, "warfarin", ((0, 1, "Chemical"),)),  # span is the first and last token
        make_doc(nlp, long_text, ((0, 1, "Chemical"), (1198, 1199, "Chemical"))),
    ]
    called = [nlp(make_doc(nlp)), nlp(nlp.make_doc("")), nlp(nlp.make_doc("no entities here"))]
    called += [nlp(make_doc(nlp, "warfarin", ((0, 1, "Chemical"),)))]
    called += [nlp(make_doc(nlp, long_text, ((0, 1, "Chemical"), (1198, 1199, "Chemical"))))]
    piped = list(nlp.pipe(docs, batch_size=2))
    for a, b in zip(called, piped):
        assert [(e.start, e.end, e.kb_id_) for e in a.ents] == [(e.start, e.end, e.kb_id_) for e in b.ents]
        for x, y in zip(a.ents, b.ents):
            assert [c[0] for c in x._.pel_candidates] == [c[0] for c in y._.pel_candidates]
            np.testing.assert_allclose([c[2] for c in x._.pel_candidates], [c[2] for c in y._.pel_candidates], atol=1e-4)
    assert len(piped[1].ents) == 0 and len(piped[4].ents) == 2


def test_roundtrip_to_disk_and_bytes(nlp, tmp_path, kb_dir):
    nlp.get_pipe("pel_linker").threshold = 0.1
    before = nlp(make_doc(nlp))
    nlp.to_disk(tmp_path / "pipeline")
    assert (tmp_path / "pipeline" / "pel_linker" / "encoder" / "entity" / "model.safetensors").exists()
    assert (tmp_path / "pipeline" / "pel_linker" / "kb" / "index.faiss").exists()
    kb_dir.rename(tmp_path / "moved")  # the saved pipeline must not need the original KB
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("pel_linker").threshold == 0.1
    after = loaded(make_doc(loaded))
    assert [(e.kb_id_, e._.pel_candidates) for e in before.ents] == [(e.kb_id_, e._.pel_candidates) for e in after.ents]
    nlp2 = spacy.blank("en")
    nlp2.add_pipe("pel_linker")
    nlp2.from_bytes(nlp.to_bytes())
    again = nlp2(make_doc(nlp2))
    assert [e.kb_id_ for e in again.ents] == [e.kb_id_ for e in before.ents]


def test_other_encoder_refused(kb_dir, other_tiny_bert):
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "encoder": str(other_tiny_bert)})
    with pytest.raises(EncoderMismatchError, match="built with entity encoder"):
        linker.initialize()
    with pytest.raises(EncoderMismatchError):
        linker.set_resources(BiEncoder.from_pretrained(str(other_tiny_bert)), EntityIndex.from_disk(kb_dir))


def test_no_kb_is_a_clear_error():
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker")
    with pytest.raises(ValueError, match="has no KB"):
        nlp(make_doc(nlp))


def test_score_uses_spacy_link_scorer(nlp):
    pred = nlp(make_doc(nlp))
    gold = make_doc(nlp)
    gold.ents = [Span(gold, e.start, e.end, label=e.label_, kb_id=e.kb_id_) for e in pred.ents]
    gold.ents = [gold.ents[0], gold.ents[1], Span(gold, 7, 9, label="Disease", kb_id="WRONG")]
    scores = nlp.get_pipe("pel_linker").score([Example(pred, gold)])
    assert scores["nel_micro_p"] == pytest.approx(2 / 3) and scores["nel_micro_r"] == pytest.approx(2 / 3)


def test_spans_key_mode(kb_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "spans_key": "mentions"})
    doc = nlp.make_doc(TEXT)
    doc.spans["mentions"] = [Span(doc, 0, 2), Span(doc, 0, 1)]  # overlapping spans are fine here
    doc = nlp(doc)
    assert all(s.kb_id_.startswith("D") for s in doc.spans["mentions"])
    assert all(s._.pel_candidates for s in doc.spans["mentions"]) and not doc.ents


def test_collective_mode_links_every_span(kb_dir):
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "collective": True, "top_k": 2})
    long_text = " ".join(["aspirin and warfarin"] * 400)
    docs = [make_doc(nlp), nlp.make_doc(""), make_doc(nlp, long_text, ((0, 1, "Chemical"), (1198, 1199, "Chemical")))]
    out = list(nlp.pipe(docs))
    assert [len(d.ents) for d in out] == [3, 0, 2]
    assert all(e.kb_id_.startswith("D") and len(e._.pel_candidates) == 2 for d in out for e in d.ents)
    # the same span text in the same context gives the same vector either way it is batched
    single = nlp(make_doc(nlp))
    assert [e._.pel_candidates for e in single.ents] == [e._.pel_candidates for e in out[0].ents]
