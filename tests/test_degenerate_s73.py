"""Degenerate sizes and settings: the NIL evidence at top_k 1, chunk sizes below 1, training with no negative
possible, mentions with no candidate in the metrics, and the calibrated threshold's range."""
import numpy as np
import pytest
import spacy
from spacy.tokens import Span
from spacy.training import Example
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.corpora import GOLD_KEY, NIL, bare_doc, write_docbin
from spacy_pel.evaluation import nil as nil_module
from spacy_pel.evaluation.errors import mention_errors
from spacy_pel.evaluation.linking import mention_table, metrics
from spacy_pel.evaluation.nil import calibrate, nil_curve, plot_curve
from spacy_pel.files import InputError
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.pipeline.nil import FEATURES
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.names import build_names
from spacy_pel.training.retriever import RetrieverTask
from tests.conftest import KB_LINES
from tests.test_cli_errors import one_line_error
from tests.test_train import config, overrides

TEXT = "Lithium carbonate toxicity with warfarin and tricuspid regurgitation rose by 5 % ."
MARGIN_NIL = {"@misc": "spacy_pel.nil.classifier.v1", "weights": {"margin": 20.0}, "bias": -3.0}


def gold(nlp, spans, text=TEXT):
    doc = nlp.make_doc(text)
    doc.spans[GOLD_KEY] = [Span(doc, a, b, label=label, kb_id=kb_id) for a, b, label, kb_id in spans]
    doc.ents = list(doc.spans[GOLD_KEY])
    return doc


def small_kb(tmp_path, encoder, lines, name):
    (tmp_path / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf8")
    build_kb(tmp_path / f"{name}.jsonl", tmp_path / name, format="jsonl", encoder=str(encoder), progress=False)
    return tmp_path / name


# ---------------------------------------------------------------- bug01: the NIL evidence does not depend on top_k
def test_nil_evidence_and_decision_are_the_same_at_every_top_k(kb_dir):
    spans = [[(0, 2, "Chemical"), (2, 3, "Disease"), (4, 5, "Chemical")]]
    seen = {}
    for top_k in (10, 2, 1):
        nlp = spacy.blank("en")
        linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": top_k, "threshold": 0.5, "nil": MARGIN_NIL})
        (linked,) = linker.candidates([nlp.make_doc(TEXT)], spans)
        assert linked.rows.shape[1] == top_k  # top_k candidates kept (5 entities: the others row -1)
        seen[top_k] = linked
        doc = nlp(gold(nlp, [(a, b, label, "D1") for a, b, label in spans[0]]))
        assert all(len(e._.pel_candidates) == min(top_k, 5) for e in doc.ents)
    margin = FEATURES.index("margin")
    for top_k in (2, 1):
        assert np.array_equal(seen[top_k].features, seen[10].features)
        assert np.array_equal(seen[top_k].confidence, seen[10].confidence)
        assert np.array_equal(seen[top_k].rows, seen[10].rows[:, :top_k])
    # unchanged at top_k >= 2: the margin is the top score's lead over the kept runner-up
    two = seen[2]
    assert two.features[:, margin] == pytest.approx(two.scores[:, 0] - two.scores[:, 1])


# ---------------------------------------------------------------- bug02: chunk sizes below 1
@pytest.mark.parametrize("size", ["-1", "0"])
def test_a_chunk_size_below_one_is_refused_in_one_line(kb_dir, kb_file, tiny_encoder_dir, tmp_path, size):
    out = tmp_path / "names"
    one_line_error(CliRunner().invoke(app, ["build-names", str(kb_dir), "-o", str(out), "--chunk-size", size]),
                   "--chunk-size must be at least 1")
    assert not out.exists() and not (tmp_path / "names.partial").exists()
    one_line_error(CliRunner().invoke(app, ["build-kb", "--kb", str(kb_file), "-o", str(tmp_path / "kb2"), "--encoder",
                                            str(tiny_encoder_dir), "--chunk-size", size]), "--chunk-size must be at least 1")
    assert not (tmp_path / "kb2").exists() and not (tmp_path / "kb2.partial").exists()
    with pytest.raises(InputError, match="chunk size at least 1"):
        build_names(kb_dir, out, chunk_size=int(size), progress=False)
    assert not (tmp_path / "names.partial").exists()


# ---------------------------------------------------------------- bug03: no negative possible
def test_training_where_no_negative_is_possible_is_refused_before_the_model_loads(tmp_path, tiny_encoder_dir,
                                                                                  monkeypatch):
    nlp = spacy.blank("en")
    one, two = small_kb(tmp_path, tiny_encoder_dir, KB_LINES[:1], "one"), small_kb(tmp_path, tiny_encoder_dir, KB_LINES[:2], "two")
    write_docbin([gold(nlp, [(0, 2, "Chemical", "D1"), (2, 3, "Disease", NIL)])], tmp_path / "lithium.spacy")
    write_docbin([gold(nlp, [(0, 2, "Chemical", "D1"), (6, 8, "Disease", "D1|D2")])], tmp_path / "composite.spacy")

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(BiEncoder, "from_pretrained", no_model)
    for kb, corpus, fragment in ((one, "lithium.spacy", "1 of its 1 linkable gold mentions has every one of the KB's 1 entity"),
                                 (two, "composite.spacy", "1 of its 2 linkable gold mentions has every one of the KB's 2 entities")):
        with pytest.raises(InputError, match=fragment):
            RetrieverTask(config(overrides(tmp_path / corpus, kb, tiny_encoder_dir)))
    monkeypatch.undo()
    # spacy train: the linker's initialize with the training examples refuses them before any update
    nlp.add_pipe("pel_linker", config={"kb": str(two)})
    examples = [Example(bare_doc(d, nlp.vocab), d) for d in [gold(nlp, [(6, 8, "Disease", "D1|D2")])]]
    with pytest.raises(InputError, match="no other entity to be their negative"):
        nlp.initialize(lambda: examples)
    ok = [Example(bare_doc(d, nlp.vocab), d) for d in [gold(nlp, [(0, 2, "Chemical", "D1"), (6, 8, "Disease", "D2|D9")])]]
    nlp.initialize(lambda: ok)  # a mention with one of the two entities as gold has the other as its negative


# ---------------------------------------------------------------- bug04: a mention with no candidate is NIL
def test_a_mention_without_candidate_is_counted_as_the_linkers_nil(kb_dir):
    rows = [([NIL], [], np.zeros(1, np.float32), 0.0), ([NIL], [None], np.zeros(1, np.float32), 0.0),
            (["D1"], ["D1", "D2"], np.array([0.2, 0.1], np.float32), 0.2), ([NIL], ["D3"], np.array([0.1], np.float32), 0.1)]
    report = metrics(rows, 0.0, {"D1", "D2", "D3"})
    assert report["nil"]["p"] == 1.0 and report["nil"]["r"] == pytest.approx(2 / 3, abs=1e-4)  # the two without candidates
    assert report["accuracy_with_nil"] == 0.75  # D1 linked right as before; the NIL mention with a candidate is linked
    assert metrics(rows, 0.0, {"D1", "D2", "D3"}, threshold=0.15)["nil"]["r"] == 1.0  # unchanged: the threshold rule
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    doc = gold(nlp, [(0, 2, "Chemical", "D1"), (11, 12, "Unit", NIL)])
    assert nlp(gold(nlp, [(11, 12, "Unit", NIL)])).ents[0].kb_id_ == NIL  # "%": no candidate, the linker's NIL
    scores = nlp.evaluate([Example(bare_doc(doc, nlp.vocab), doc)])
    assert (scores["pel_nil_p"], scores["pel_nil_r"], scores["pel_nil_f"]) == (1.0, 1.0, 1.0)

    # evaluate --errors agrees: a NIL mention the linker left without candidate is no "linked_nil" error
    linker = nlp.get_pipe("pel_linker")
    linker.ensure_loaded()
    only_nil = gold(nlp, [(11, 12, "Unit", NIL)])
    rows, _ = mention_table(linker, [only_nil])
    assert mention_errors(rows, [only_nil], linker.index) == []


# ---------------------------------------------------------------- bug05 / bug06: the calibrated threshold
def test_a_recall_loss_bound_no_cut_keeps_gives_nothing_nil(tmp_path):
    curve = nil_curve(np.array([0.1, 0.5]), np.array([False, True]), np.array([True, False]), 0.5)
    assert curve["threshold"] is None and curve["in_kb_r1_loss"] == 0.0
    assert (curve["p"], curve["r"], curve["f"]) == (None, 0.0, None)  # nothing called NIL: P and F1 n/a, as evaluate says
    assert "nothing is NIL" in curve["note"]
    plot_curve(curve, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 0
    with pytest.raises(InputError, match="no threshold keeps"):  # a negative bound: not even "nothing NIL"
        nil_curve(np.array([0.1, 0.5]), np.array([False, True]), np.array([True, False]), -1.0)
    # unchanged where a cut keeps the bound
    conf, is_nil, correct = np.array([0.1, 0.2, 0.3, 0.4, 0.9]), np.array([1, 0, 1, 0, 0], bool), np.array([0, 1, 0, 0, 1], bool)
    assert nil_curve(conf, is_nil, correct, 0.5)["threshold"] == pytest.approx(0.35)


def test_the_threshold_is_chosen_within_the_linkers_own_range(kb_dir, tmp_path, monkeypatch):
    conf = np.array([0.5, 0.95, 1.05, 1.08, 1.12, 1.15])
    is_nil = np.array([1, 0, 1, 1, 0, 0], bool)
    assert nil_curve(conf, is_nil)["threshold"] < 1.0  # unchanged at the default bound 1
    wide = nil_curve(conf, is_nil, upper=1.2)
    assert wide["threshold"] == pytest.approx(1.1) and wide["f"] == pytest.approx(6 / 7)
    assert all(p["threshold"] <= 1.2 for p in wide["points"])
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "rules": {"cn": {"@misc": "spacy_pel.rules.char_ngrams.v1",
                                                                            "weight": 0.2}}})
    nlp.to_disk(tmp_path / "pipe")
    write_docbin([gold(nlp, [(0, 2, "Chemical", "D1"), (2, 3, "Disease", NIL), (4, 5, "Chemical", "D5")])], tmp_path / "dev.spacy")
    seen = {}

    def curve(*args, **kwargs):
        seen["upper"] = kwargs.get("upper")
        return nil_curve(*args, **kwargs)

    monkeypatch.setattr(nil_module, "nil_curve", curve)
    calibrate(tmp_path / "pipe", tmp_path / "dev.spacy", tmp_path / "out")
    assert seen["upper"] == pytest.approx(1.2)
    calibrate(tmp_path / "pipe", tmp_path / "dev.spacy", tmp_path / "out_cls", nil="classifier")
    assert seen["upper"] == 1.0  # a classifier's confidence is a probability


def test_build_kb_from_python_refuses_a_chunk_size_of_zero(kb_file, tiny_encoder_dir, tmp_path):
    """The library call refused 0 only after replacing it by the default (``chunk_size or CHUNK``)."""
    with pytest.raises(InputError, match="chunk size must be at least 1"):
        build_kb(kb_file, tmp_path / "kb", format="jsonl", encoder=str(tiny_encoder_dir), chunk_size=0, progress=False)
    assert not (tmp_path / "kb").exists()
