"""spacy_pel.rules.label_types.v1: candidates of a type that fits the span's label come first; and
``python -m spacy_pel label-types``, which checks all it is given before it writes anything."""
import json
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli.label_types import app
from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.kb import Entity
from spacy_pel.pipeline.label_types import LabelTypesRule
from spacy_pel.pipeline.rules.batch import CandidateBatch
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.retrieval.search import FlatSearch
from tests.test_cli_errors import one_line_error

TEXT = "Lithium carbonate toxicity in a newborn with tricuspid regurgitation and an atrial flutter ."
SPANS = ((0, 2, "Chem"), (7, 9, "Dis"), (11, 13, "Dis"), (3, 4, "Other"))
TYPES = {"Chem": ["Chemical"], "Dis": ["Disease"]}


def _batch(index, rows, scores, **kw):
    nlp = spacy.blank("en")
    doc = nlp.make_doc(TEXT)
    doc.ents = [Span(doc, a, b, label) for a, b, label in SPANS]
    return CandidateBatch([doc], [list(SPANS)], [doc[a:b].text for a, b, _ in SPANS], None, scores.copy(), rows.copy(), index, **kw)


def test_fitting_candidates_move_up_and_the_rest_keeps_its_order(kb_dir):
    index = EntityIndex.from_disk(kb_dir)
    r = {i: index.lookup[i] for i in ("D1", "D2", "D3", "D4", "D5")}
    rows = np.array([[r["D2"], r["D1"], r["D3"], r["D4"]],   # Chem: D1 and D4 fit, D2 and D3 do not
                     [r["D1"], r["D4"], r["D5"], -1],        # Dis: nothing fits → untouched
                     [r["D4"], -1, -1, -1],                  # decided below → untouched
                     [r["D5"], r["D2"], -1, -1]], dtype=np.int64)  # label not in the map → untouched
    scores = np.array([[0.9, 0.8, 0.7, 0.6], [0.9, 0.5, 0.4, 0], [1.0, 0, 0, 0], [0.9, 0.8, 0, 0]], dtype=np.float32)
    batch = _batch(index, rows, scores, decided={2: r["D4"]})
    rule = LabelTypesRule(TYPES, penalty=1.0)
    rule.setup(None, index)
    rule(batch)
    assert batch.rows[0].tolist() == [r["D1"], r["D4"], r["D2"], r["D3"]]
    np.testing.assert_allclose(batch.scores[0], [0.8, 0.6, 0.9 - 1.0, 0.7 - 1.0], atol=1e-6)
    for i in (1, 2, 3):
        assert (batch.rows[i] == rows[i]).all() and (batch.scores[i] == scores[i]).all()
    batch = _batch(index, rows, scores, matched={0})  # the alias table chose mention 0's candidates by name
    rule(batch)
    assert (batch.rows[0] == rows[0]).all() and (batch.scores[0] == scores[0]).all()


def test_empty_slots_stay_last_with_a_small_penalty(kb_dir):
    index = EntityIndex.from_disk(kb_dir)
    rows = np.array([[index.lookup["D2"], index.lookup["D1"], -1, -1]] + [[-1] * 4] * 3, dtype=np.int64)
    scores = np.array([[0.9, 0.85, 0.0, 0.0]] + [[0.0] * 4] * 3, dtype=np.float32)
    batch = _batch(index, rows, scores)
    rule = LabelTypesRule(TYPES, penalty=0.01)
    rule.setup(None, index)
    rule(batch)
    assert batch.rows[0].tolist() == [index.lookup["D2"], index.lookup["D1"], -1, -1]  # 0.89 still beats 0.85
    rule = LabelTypesRule(TYPES, penalty=0.1)
    rule.setup(None, index)
    rule(batch)
    assert batch.rows[0].tolist() == [index.lookup["D1"], index.lookup["D2"], -1, -1]


def test_in_a_pipeline_from_the_config(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    rules = {"label_types": {"@misc": "spacy_pel.rules.label_types.v1", "label_types": TYPES, "penalty": 1.0}}
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 5, "rules": rules})
    doc = nlp.make_doc(TEXT)
    doc.ents = [Span(doc, a, b, label) for a, b, label in SPANS]
    nlp(doc)
    types = {"D1": "Chemical", "D4": "Chemical", "D5": "Chemical", "D2": "Disease", "D3": "Disease"}
    for ent in [e for e in doc.ents if e.label_ in TYPES]:  # all five entities are candidates: the fitting ones lead
        want = TYPES[ent.label_][0]
        got = [types[c[0]] for c in ent._.pel_candidates]
        assert got[: got.count(want)] == [want] * got.count(want)
    nlp.to_disk(tmp_path / "p")
    again = spacy.load(tmp_path / "p")
    assert again.get_pipe("pel_linker").rules["label_types"].allowed == {"Chem": {"Chemical"}, "Dis": {"Disease"}}


def _linked(kb_dir, **settings):
    nlp = spacy.blank("en")
    rules = {"label_types": {"@misc": "spacy_pel.rules.label_types.v1", "label_types": TYPES, **settings}}
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 5, "rules": rules})
    doc = nlp.make_doc(TEXT)
    doc.ents = [Span(doc, a, b, label) for a, b, label in SPANS]
    return {(e.start, e.end): [(c[0], c[-1]) for c in e._.pel_candidates] for e in nlp(doc).ents}


def test_a_label_with_few_fitting_entities_is_searched_among_them_only(kb_dir):
    """Dis fits 2 of the 5 entities (≤ half the KB): its mentions are searched among those two, with the
    scores the whole-KB search gives them; Chem fits 3 (more than half): the whole KB, re-ranked as before."""
    whole = _linked(kb_dir, search_share=0)
    among = _linked(kb_dir)  # the default search_share, 0.5
    for a, b, label in SPANS:
        if label == "Dis":
            assert len(whole[a, b]) == 5 and [c for c, _ in among[a, b]] == [c for c, _ in whole[a, b][:2]]
            assert {c for c, _ in among[a, b]} == {"D2", "D3"}
            np.testing.assert_allclose([x for _, x in among[a, b]], [x for _, x in whole[a, b][:2]], atol=1e-4)
        else:
            assert among[a, b] == whole[a, b]
    assert _linked(kb_dir, search_share=0.3) == whole  # 2 of 5 is more than 0.3 of the KB
    # another NER's names for the same labels (case aside) are searched the same way
    assert _linked(kb_dir, label_types={k.upper(): v for k, v in TYPES.items()}) == among


def test_entities_added_to_the_kb_are_searched_too(kb_dir):
    nlp = spacy.blank("en")
    rules = {"label_types": {"@misc": "spacy_pel.rules.label_types.v1", "label_types": TYPES}}
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 5, "rules": rules})

    def disease_candidates():
        doc = nlp.make_doc(TEXT)
        doc.ents = [Span(doc, a, b, label) for a, b, label in SPANS]
        return {c[0] for e in nlp(doc).ents if e.label_ == "Dis" for c in e._.pel_candidates}

    assert disease_candidates() == {"D2", "D3"}
    linker.index.add([Entity("D6", "mitral regurgitation", types=["Disease"])], linker.encoder)
    assert disease_candidates() == {"D2", "D3", "D6"}


def test_subset_search_answers_in_the_kb_rows_and_pads_a_short_subset():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(50, 8)).astype(np.float32)
    queries = rng.normal(size=(7, 8)).astype(np.float32)
    rows = np.array([3, 9, 17, 30, 41])
    scores, found = FlatSearch.from_array(vectors, "fp32").subset(rows).search(queries, 8)
    exact = queries @ vectors[rows].T
    order = np.argsort(-exact, axis=1)
    assert (found[:, :5] == rows[order]).all() and (found[:, 5:] == -1).all()
    np.testing.assert_allclose(scores[:, :5], np.take_along_axis(exact, order, axis=1), atol=1e-5)
    kb = EntityIndex([Entity(f"E{i}", f"name {i}") for i in range(50)], vectors, metric="cosine", fingerprint="x",
                     kind="hnsw")
    among_scores, among_found = kb.among(rows).search(queries, 8)  # exact, over the rows' saved (float16) vectors
    assert (among_found[:, 5:] == -1).all()
    for q in range(len(queries)):
        assert sorted(among_found[q, :5]) == sorted(rows)  # KB rows, every one of the subset
        np.testing.assert_allclose(among_scores[q, :5], queries[q] @ vectors[among_found[q, :5]].T, atol=0.05)
        assert (np.diff(among_scores[q, :5]) <= 1e-6).all()


@pytest.mark.parametrize("bad", [{"label_types": ["Chemical"]}, {"label_types": {"Chem": "Chemical"}},
                                 {"label_types": TYPES, "penalty": -1}, {"label_types": TYPES, "penalty": True},
                                 {"label_types": TYPES, "search_share": 1.5}, {"label_types": TYPES, "search_share": "all"}])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError, match="label_types"):
        LabelTypesRule(**bad)


def test_tied_mentions_follow_chains_to_the_mention_that_was_retrieved(kb_dir):
    """A short form tied to a long-form mention that the repeats rule tied to its first occurrence takes
    the first occurrence's candidates (not the zeros its direct target holds)."""
    index = EntityIndex.from_disk(kb_dir)
    rows = np.array([[-1] * 4, [-1] * 4, [3, 2, -1, -1], [-1] * 4], dtype=np.int64)
    scores = np.array([[0.0] * 4, [0.0] * 4, [0.9, 0.5, 0, 0], [0.0] * 4], dtype=np.float32)
    batch = _batch(index, rows, scores, same_as={0: 1, 1: 2, 3: 3})
    batch.finish()
    for i in (0, 1):
        assert batch.rows[i].tolist() == [3, 2, -1, -1] and batch.scores[i][0] == pytest.approx(0.9)
    assert batch.root(3) == 3  # a mention tied to itself is its own root


# ---------------------------------------------------------------- label-types command line
CONFIGS = Path(__file__).resolve().parents[1] / "configs"



def gold_corpus(path, gold=((0, 2, "Chem", "D1"), (7, 9, "Dis", "D2"))):
    doc = spacy.blank("en").make_doc(TEXT)
    doc.spans[GOLD_KEY] = [Span(doc, a, b, label, kb_id=kb) for a, b, label, kb in gold]
    write_docbin([doc], path)
    return path


def test_cli_checks_the_config_before_writing_anything(kb_dir, tmp_path):
    corpus, out, cfg_out = gold_corpus(tmp_path / "train.spacy"), tmp_path / "lt.json", tmp_path / "linker.cfg"
    out.write_text("kept\n")
    args = [str(corpus), "--kb", str(kb_dir), "-o", str(out), "--config-out", str(cfg_out)]
    result = CliRunner().invoke(app, args + ["--config", str(CONFIGS / "linker.cfg")])  # no label_types rule in it
    one_line_error(result, "linker.cfg", "[rules.label_types] rule, found 0")
    assert out.read_text() == "kept\n" and not cfg_out.exists() and result.stdout == ""
    pubtator = tmp_path / "small.pubtator"
    pubtator.write_text("1|t|Lithium carbonate toxicity.\n1|a|None.\n")
    one_line_error(CliRunner().invoke(app, args + ["--config", str(pubtator)]), f"--config {pubtator}", "no section headers")
    pubtator.write_bytes(b"\xff\xfe not text")
    one_line_error(CliRunner().invoke(app, args + ["--config", str(pubtator)]), f"--config {pubtator}",
                   f"{pubtator}:1: not UTF-8 text")  # the line named (session 73)
    assert out.read_text() == "kept\n" and not cfg_out.exists()
    cfg_out.mkdir()
    one_line_error(CliRunner().invoke(app, args + ["--config", str(CONFIGS / "linker_rules.cfg")]), str(cfg_out), "folder")
    assert out.read_text() == "kept\n"
    cfg_out.rmdir()
    result = CliRunner().invoke(app, args + ["--config", str(CONFIGS / "linker_rules.cfg")])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == {"Chem": ["Chemical"], "Dis": ["Disease"]} and cfg_out.exists()


def test_cli_refuses_a_map_naming_types_the_kb_does_not_have(kb_dir, tmp_path):
    corpus, out = gold_corpus(tmp_path / "train.spacy"), tmp_path / "lt.json"
    given = tmp_path / "map.json"
    given.write_text('{"Dis": ["Disease", "NoSuchType", "Other"]}')
    result = CliRunner().invoke(app, [str(corpus), "--kb", str(kb_dir), "-o", str(out), "--map", str(given)])
    one_line_error(result, "NoSuchType, Other", "its types: Chemical, Disease")
    assert "Disease," not in result.stderr.split("its types")[0] and not out.exists()
    given.write_text('{"Dis": ["Disease"]}')
    result = CliRunner().invoke(app, [str(corpus), "--kb", str(kb_dir), "-o", str(out), "--map", str(given)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == {"Dis": ["Disease"]}


def test_cli_warns_on_a_corpus_without_gold_mentions(kb_dir, tmp_path):
    corpus, out = gold_corpus(tmp_path / "train.spacy", gold=()), tmp_path / "lt.json"
    result = CliRunner().invoke(app, [str(corpus), "--kb", str(kb_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "warning: no gold mentions in" in result.stderr
    assert json.loads(out.read_text()) == {}
