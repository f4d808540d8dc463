import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch
from confection import Config
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.util import load_model_from_config, registry

import spacy_pel.models.encoder as encoder_module
from spacy_pel.models.doc_encoder import encode_docs, span_link_vectors
from spacy_pel.models.encoder import BiEncoder, EncoderMismatchError, Mention
from spacy_pel.models.span_scorer import SpanScorer, save_span_scorer
from spacy_pel.pipeline.config import LinkerSettings
from spacy_pel.pipeline.linker import configure_linker
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.index import EntityIndex

TEXT = "Lithium carbonate toxicity caused tricuspid regurgitation and atrial flutter in a newborn"
SPANS = ((0, 2, "Chemical"), (4, 6, "Disease"), (7, 9, "Disease"))
COLLECTIVE = {"@misc": "spacy_pel.vectors.collective.v1"}


def make_doc(nlp, text=TEXT, spans=SPANS):
    doc = nlp.make_doc(text)
    doc.ents = [Span(doc, a, b, label=l) for a, b, l in spans]
    return doc


def direct_top(linker, doc, spans, k=1, collective=False):
    """Ids and scores of a direct index search with the linker's encoder (no component code)."""
    enc, index = linker.encoder, linker.index
    if collective:
        (H,) = encode_docs(enc, [doc])
        with torch.inference_mode():
            vectors = span_link_vectors(enc, H, [a for a, _ in spans], [b for _, b in spans]).numpy()
    else:
        vectors = enc.encode_mentions([Mention(doc.text, doc[a].idx, doc[b - 1].idx + len(doc[b - 1])) for a, b in spans])
    scores, rows = index.search(vectors, k)
    return [[index.entities[r].id for r in row] for row in rows], scores


def linked(doc, spans=None):
    return [(e.start, e.end, e.kb_id_, e._.pel_candidates) for e in (doc.ents if spans is None else spans)]


@pytest.fixture
def nlp(kb_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3})  # found via the entry point
    return nlp


@pytest.fixture
def saved(nlp, tmp_path):
    """A pipeline that has linked once (so it holds encoder and KB), saved; (path, its output)."""
    out = nlp(make_doc(nlp))
    nlp.to_disk(tmp_path / "pipeline")
    return tmp_path / "pipeline", linked(out)


def test_kb_ids_persist_on_fresh_ents(nlp):
    doc = nlp(make_doc(nlp))
    ids = [e.kb_id_ for e in doc.ents]  # a fresh doc.ents: ids must have stuck
    linker = nlp.get_pipe("pel_linker")
    expected, scores = direct_top(linker, doc, [(a, b) for a, b, _ in SPANS], k=3)
    assert ids == [row[0] for row in expected]
    assert [t.ent_kb_id_ for t in doc[0:2]] == [ids[0]] * 2
    for ent, row, row_scores in zip(doc.ents, expected, scores):
        cands = ent._.pel_candidates
        assert [c[0] for c in cands] == row and cands[0][0] == ent.kb_id_
        np.testing.assert_allclose([c[2] for c in cands], row_scores, atol=1e-4)
    assert [e.label_ for e in doc.ents] == ["Chemical", "Disease", "Disease"]


def test_the_garbage_collector_is_paused_while_a_batch_is_linked_and_left_as_it_was(nlp, monkeypatch):
    import gc

    linker, during = nlp.get_pipe("pel_linker"), []
    predict = linker.predict
    monkeypatch.setattr(linker, "predict", lambda docs: during.append(gc.isenabled()) or predict(docs))
    assert gc.isenabled()
    nlp(make_doc(nlp))
    list(nlp.pipe([make_doc(nlp), make_doc(nlp)]))
    assert during == [False, False] and gc.isenabled()
    gc.disable()  # a caller's own setting stays
    try:
        nlp(make_doc(nlp))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_threshold_gives_nil(nlp):
    linker = nlp.get_pipe("pel_linker")
    doc = nlp(make_doc(nlp))
    ids = [e.kb_id_ for e in doc.ents]
    top = [e._.pel_candidates[0][2] for e in doc.ents]
    with pytest.warns(UserWarning, match="set on the component only.*configure_linker"):  # not in nlp.config
        linker.threshold = (sorted(top)[0] + sorted(top)[1]) / 2  # the lowest-scoring span falls under it
    doc = nlp(make_doc(nlp))
    expected = ["NIL" if s < linker.threshold else i for s, i in zip(top, ids)]
    assert [e.kb_id_ for e in doc.ents] == expected and expected.count("NIL") == 1
    linker.threshold = 1.0  # above every score of this untrained encoder
    assert {e.kb_id_ for e in nlp(make_doc(nlp)).ents} == {"NIL"}
    with pytest.raises(ValueError, match=r"outside \[-1, 1\]"):
        linker.threshold = 2.0  # cosine never exceeds 1


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


@pytest.mark.parametrize("vectors", [None, COLLECTIVE])
def test_span_without_word_characters_is_nil(kb_dir, vectors):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), **({"vectors": vectors} if vectors else {})})
    words = ["aspirin", ",", "\u0007", "\n", "--", "warfarin"]
    doc = Doc(nlp.vocab, words=words, spaces=[True, True, True, False, True, False])
    doc.ents = [Span(doc, i, i + 1, label="X") for i in range(len(words))]
    out = nlp(doc)
    assert [e.kb_id_ for e in out.ents][1:5] == ["NIL"] * 4
    assert [e._.pel_candidates for e in out.ents][1:5] == [[]] * 4
    assert out.ents[0].kb_id_ != "NIL" and out.ents[5].kb_id_ != "NIL"


def test_roundtrip_to_disk_and_bytes(nlp, tmp_path, kb_dir):
    configure_linker(nlp, threshold=0.1)  # in the component and in nlp.config
    before = nlp(make_doc(nlp))
    nlp.to_disk(tmp_path / "pipeline")
    assert (tmp_path / "pipeline" / "pel_linker" / "encoder" / "entity" / "model.safetensors").exists()
    assert (tmp_path / "pipeline" / "pel_linker" / "kb" / "embeddings.npy").exists()
    assert not (tmp_path / "pipeline" / "pel_linker" / "cfg.json").exists()  # settings live in config.cfg
    kb_dir.rename(tmp_path / "moved")  # the saved pipeline must not need the original KB
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("pel_linker").threshold == 0.1
    after = loaded(make_doc(loaded))
    assert linked(before) == linked(after)
    nlp2 = spacy.blank("en")
    nlp2.add_pipe("pel_linker")
    nlp2.from_bytes(nlp.to_bytes())
    again = nlp2(make_doc(nlp2))
    assert [e.kb_id_ for e in again.ents] == [e.kb_id_ for e in before.ents]


def test_settings_given_at_load_time_are_used(saved):
    path, _ = saved
    loaded = spacy.load(path, config={"components": {"pel_linker": {"threshold": 0.99, "top_k": 2}}})
    linker = loaded.get_pipe("pel_linker")
    assert (linker.threshold, linker.top_k) == (0.99, 2)
    assert loaded.config["components"]["pel_linker"]["threshold"] == 0.99
    doc = loaded(make_doc(loaded))
    assert [len(e._.pel_candidates) for e in doc.ents] == [2, 2, 2]
    assert {e.kb_id_ for e in doc.ents} == {"NIL"}  # the untrained encoder scores < 0.99


def test_edited_config_cfg_is_used(saved):
    path, before = saved
    cfg = Config().from_disk(path / "config.cfg", interpolate=False)
    cfg["components"]["pel_linker"]["top_k"] = 1
    cfg.to_disk(path / "config.cfg")
    loaded = spacy.load(path)
    doc = loaded(make_doc(loaded))
    assert [(a, b, i, c[:1]) for a, b, i, c in before] == linked(doc)


def test_kb_given_at_load_time_is_used(saved, kb_dir, tmp_path):
    path, _ = saved
    small = EntityIndex.from_disk(kb_dir)
    small = small.subset([small.row["D4"], small.row["D5"]])  # same encoder, two entities
    small.to_disk(tmp_path / "small_kb")
    loaded = spacy.load(path, config={"components": {"pel_linker": {"kb": str(tmp_path / "small_kb")}}})
    doc = loaded(make_doc(loaded))
    assert len(loaded.get_pipe("pel_linker").index) == 2
    assert {e.kb_id_ for e in doc.ents} <= {"D4", "D5"}
    assert all({c[0] for c in e._.pel_candidates} == {"D4", "D5"} for e in doc.ents)


def test_initialize_keeps_the_loaded_encoder_and_refuses_another_kb(saved, kb_dir, kb_file, other_tiny_bert, tmp_path):
    path, before = saved
    loaded = spacy.load(path)
    linker = loaded.get_pipe("pel_linker")
    linker.ensure_loaded()
    held = linker.encoder
    shutil.copytree(kb_dir, tmp_path / "same_kb")  # built with the same encoder: accepted, encoder kept
    linker.initialize(kb_path=str(tmp_path / "same_kb"))
    assert linker.encoder is held
    build_kb(kb_file, tmp_path / "other_kb", format="jsonl", encoder=str(other_tiny_bert), progress=False)
    with pytest.raises(EncoderMismatchError, match=r"keeps the encoder it holds.*initialize\(encoder="):
        linker.initialize(kb_path=str(tmp_path / "other_kb"))
    assert linker.encoder is held and linker(make_doc(loaded)) is not None
    linker.initialize(kb_path=str(tmp_path / "other_kb"), encoder=str(other_tiny_bert))  # explicit: allowed
    assert linker.encoder is not held and linker.index.fingerprint == linker.encoder.fingerprint()


LINKER_CFG = """
[nlp]
lang = "en"
pipeline = ["pel_linker"]

[components]

[components.pel_linker]
factory = "pel_linker"

[initialize]

[initialize.components]

[initialize.components.pel_linker]
kb_path = "kb"
"""


def test_initialize_on_a_saved_pipeline_with_a_relative_kb_path(kb_dir, tmp_path, monkeypatch):
    (tmp_path / "project").mkdir()
    shutil.copytree(kb_dir, tmp_path / "project" / "kb")
    monkeypatch.chdir(tmp_path / "project")
    nlp = load_model_from_config(Config().from_str(LINKER_CFG), auto_fill=True)  # as `spacy assemble`
    nlp.initialize()
    before = linked(nlp(make_doc(nlp)))
    nlp.to_disk(tmp_path / "pipe")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # "kb" no longer resolves
    loaded = spacy.load(tmp_path / "pipe")
    loaded.initialize()  # keeps what the pipeline holds
    assert linked(loaded(make_doc(loaded))) == before


def test_to_disk_writes_what_it_holds_and_honours_exclude(nlp, kb_dir, tmp_path):
    linker = nlp.get_pipe("pel_linker")
    assert linker.index is None and linker.encoder is None  # add_pipe loads nothing
    linker.to_disk(tmp_path / "idle", exclude=["kb", "encoder"])  # nothing wanted: nothing loaded for it
    assert linker.index is None and linker.encoder is None
    shutil.copytree(kb_dir, tmp_path / "kb_copy")
    copy = spacy.blank("en")
    copy.add_pipe("pel_linker", config={"kb": str(tmp_path / "kb_copy"), "top_k": 3})
    copy.to_disk(tmp_path / "right_away")  # add_pipe, then to_disk: the KB and encoder are saved inside
    shutil.rmtree(tmp_path / "kb_copy")  # the folder it was made from is gone (shipped elsewhere)
    assert linked(spacy.load(tmp_path / "right_away")(make_doc(copy))) == linked(nlp(make_doc(nlp)))
    before = linked(nlp(make_doc(nlp)))
    linker.to_disk(tmp_path / "no_kb", exclude=["kb"])
    assert (tmp_path / "no_kb" / "encoder").exists() and not (tmp_path / "no_kb" / "kb").exists()
    linker.to_disk(tmp_path / "no_encoder", exclude=["encoder"])
    assert (tmp_path / "no_encoder" / "kb").exists() and not (tmp_path / "no_encoder" / "encoder").exists()
    linker.to_disk(tmp_path / "full")
    fresh = spacy.blank("en")
    other = fresh.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3})
    other.from_disk(tmp_path / "full", exclude=["kb"])
    assert other.index is None and other.encoder is not None  # the KB comes from the config on first use
    assert linked(fresh(make_doc(fresh))) == before
    other.from_disk(tmp_path / "full", exclude=["encoder"])
    assert other.encoder is None and other.index is not None


def test_loaded_span_scorer_follows_the_encoder_device(kb_dir, tiny_bert, tmp_path, monkeypatch):
    torch.manual_seed(0)
    save_span_scorer(SpanScorer(32), tmp_path / "spans" / "span_scorer.safetensors")
    nlp = spacy.blank("en")
    finder = {"@misc": "spacy_pel.mentions.span_finder.v1", "scorer": str(tmp_path / "spans" / "span_scorer.safetensors")}
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "mentions": finder, "vectors": COLLECTIVE})
    nlp("Lithium carbonate toxicity")
    nlp.to_disk(tmp_path / "pipe")
    target = "cuda" if torch.cuda.is_available() else "meta"  # meta: a device other than the CPU, anywhere
    monkeypatch.setattr(encoder_module, "pick_device", lambda device="auto": torch.device(target))
    linker = spacy.load(tmp_path / "pipe").get_pipe("pel_linker")
    assert linker.encoder.device_.type == target
    assert {p.device.type for p in linker.mentions.scorer.parameters()} == {target}


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


@pytest.mark.parametrize(
    "config, message",
    [
        ({"top_k": 0}, "top_k"),
        ({"batch_size": 0}, "batch_size"),
        ({"top_k": 2.5}, "top_k"),
        ({"context_window": 4}, "context_window"),
        ({"context_window": 4096}, "context_window"),
        ({"threshold": float("nan")}, "threshold"),
        ({"nil_label": ""}, "nil_label"),
        ({"device": "gpu"}, "unknown `device`"),
        ({"mentions": {"@misc": "spacy_pel.mentions.span_finder.v1"}}, "needs `model`"),
        ({"mentions": {"@misc": "spacy_pel.mentions.span_finder.v1", "scorer": "s.safetensors", "threshold": 1.5}}, "probability"),
        ({"mentions": {"@misc": "spacy_pel.mentions.span_finder.v1", "scorer": "s.safetensors", "max_span_len": 0}}, "max_span_len"),
        ({"mentions": {"@misc": "spacy_pel.mentions.span_group.v1", "spans_key": ""}}, "spans_key"),
        ({"aliases": "aliases.json"}, "aliases"),  # only the alias table rule takes a file
        ({"collective": True}, "collective"),  # the old flat switches are gone: spaCy names the key
    ],
)
def test_bad_settings_fail_at_construction(config, message):
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match=message):
        nlp.add_pipe("pel_linker", config=config)


def test_context_window_checked_against_the_encoder(tiny_encoder_dir):
    encoder = BiEncoder.from_pretrained(tiny_encoder_dir)
    encoder.mention_model.config.max_position_embeddings = 256
    with pytest.raises(ValueError, match="256 positions"):
        LinkerSettings(context_window=300).check_encoder(encoder)
    LinkerSettings(context_window=256).check_encoder(encoder)


@registry.misc("test_pel.prefer_warfarin.v1")
def prefer_warfarin():
    def rule(batch):
        d5 = batch.index.row["D5"]
        for i, text in enumerate(batch.texts):
            if "flutter" in text:
                batch.rows[i, 0], batch.scores[i, 0] = d5, 1.0
    return rule


def test_a_custom_candidate_rule_from_the_registry(kb_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 2, "rules": {"mine": {"@misc": "test_pel.prefer_warfarin.v1"}}})
    doc = nlp(make_doc(nlp))
    assert doc.ents[2].kb_id_ == "D5" and doc.ents[2]._.pel_candidates[0] == ["D5", "warfarin", 1.0]
    plain = spacy.blank("en")
    plain.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 2})
    assert [e.kb_id_ for e in doc.ents[:2]] == [e.kb_id_ for e in plain(make_doc(plain)).ents[:2]]


def test_score_uses_spacy_link_scorer(nlp):
    pred = nlp(make_doc(nlp))
    gold = make_doc(nlp)
    gold.ents = [Span(gold, e.start, e.end, label=e.label_, kb_id=e.kb_id_) for e in pred.ents]
    gold.ents = [gold.ents[0], gold.ents[1], Span(gold, 7, 9, label="Disease", kb_id="WRONG")]
    scores = nlp.get_pipe("pel_linker").score([Example(pred, gold)])
    assert scores["nel_micro_p"] == pytest.approx(2 / 3) and scores["nel_micro_r"] == pytest.approx(2 / 3)


def test_span_group_mode(kb_dir):
    nlp = spacy.blank("en")
    group = {"@misc": "spacy_pel.mentions.span_group.v1", "spans_key": "mentions"}
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "mentions": group})
    doc = nlp.make_doc(TEXT)
    doc.spans["mentions"] = [Span(doc, 0, 2), Span(doc, 0, 1), Span(doc, 7, 9)]  # overlapping spans are fine here
    doc = nlp(doc)
    expected, _ = direct_top(linker, doc, [(0, 2), (0, 1), (7, 9)])
    assert [s.kb_id_ for s in doc.spans["mentions"]] == [row[0] for row in expected]
    assert all(s._.pel_candidates for s in doc.spans["mentions"]) and not doc.ents


def test_collective_mode_links_every_span(kb_dir):
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "vectors": COLLECTIVE, "top_k": 2})
    long_text = " ".join(["aspirin and warfarin"] * 400)
    docs = [make_doc(nlp), nlp.make_doc(""), make_doc(nlp, long_text, ((0, 1, "Chemical"), (1198, 1199, "Chemical")))]
    out = list(nlp.pipe(docs))
    assert [len(d.ents) for d in out] == [3, 0, 2]
    for doc in (out[0], out[2]):
        expected, scores = direct_top(linker, doc, [(e.start, e.end) for e in doc.ents], k=2, collective=True)
        assert [[c[0] for c in e._.pel_candidates] for e in doc.ents] == expected
        assert [e.kb_id_ for e in doc.ents] == [row[0] for row in expected]
        np.testing.assert_allclose([[c[2] for c in e._.pel_candidates] for e in doc.ents], scores, atol=1e-4)
    # the same span text in the same context gives the same vector either way it is batched
    single = nlp(make_doc(nlp))
    assert [e._.pel_candidates for e in single.ents] == [e._.pel_candidates for e in out[0].ents]


def test_mention_text_mode_encodes_the_words_without_context(kb_dir):
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 2,
                                                "vectors": {"@misc": "spacy_pel.vectors.mention_text.v1"}})
    doc = nlp(make_doc(nlp))
    spans = [(e.start, e.end) for e in doc.ents]
    words = [doc[a:b].text for a, b in spans]
    vectors = linker.encoder.encode_mentions([Mention(w, 0, len(w)) for w in words])
    scores, rows = linker.index.search(vectors, 2)
    assert [e.kb_id_ for e in doc.ents] == [linker.index.entities[row[0]].id for row in rows]
    np.testing.assert_allclose([[c[2] for c in e._.pel_candidates] for e in doc.ents], scores, atol=1e-4)
    # the same words in another sentence get the same vector; in context (per_mention) they do not
    other = make_doc(nlp, "In a newborn , atrial flutter", ((4, 6, "Disease"),))
    same = linker.mention_vectors([other], [[(4, 6, "Disease")]])
    np.testing.assert_allclose(same[0], vectors[2], atol=1e-5)
    in_context = encoder_module.BiEncoder.encode_mentions(linker.encoder, [Mention(doc.text, doc[7].idx, doc[8].idx + len(doc[8]))])
    assert not np.allclose(in_context[0], vectors[2], atol=1e-3)


def test_precision_setting_reaches_the_encoder(kb_dir):
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "precision": "fp32"})
    linker.ensure_loaded()
    assert linker.encoder.config.precision == "fp32"
    with pytest.raises(ValueError, match="precision"):
        spacy.blank("en").add_pipe("pel_linker", config={"kb": str(kb_dir), "precision": "int3"})


def test_loading_a_pipeline_without_nil_threshold_says_so(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    nlp.initialize()
    nlp.to_disk(tmp_path / "p")
    with pytest.warns(UserWarning, match="no NIL threshold.*calibrate") as caught:
        spacy.load(tmp_path / "p")
    assert [Path(w.filename).name for w in caught] == [Path(__file__).name]  # the user's line, not spaCy's
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spacy.load(tmp_path / "p", config={"components": {"pel_linker": {"threshold": 0.5}}})


def test_entry_points_name_the_registered_parts():
    """setup.py's spacy_misc and spacy_tokenizers entry points load the very functions registered under
    those names."""
    from importlib.metadata import entry_points

    from spacy.util import registry

    groups = {"spacy_misc": registry.misc, "spacy_tokenizers": registry.tokenizers}
    points = [(p, table) for group, table in groups.items() for p in entry_points(group=group) if p.name.startswith("spacy_pel.")]
    setup_py = (Path(__file__).resolve().parent.parent / "setup.py").read_text(encoding="utf8")
    declared = set(re.findall(r'"(spacy_pel\.[\w.]+) = ', setup_py))
    assert {p.name for p, _ in points} == declared and len(declared) >= 12  # the install is not stale
    assert "spacy_pel.tokenizer.v1" in declared
    for point, table in points:
        assert point.load() is table.get(point.name)
