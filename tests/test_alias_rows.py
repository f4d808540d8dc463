"""``spacy_pel.rules.alias_rows.v1``: annotated surface forms as name rows of the dense index."""
import json

import numpy as np
import pytest
import spacy
from spacy.tokens import Span

from spacy_pel.models.encoder import BiEncoder
from spacy_pel.pipeline.rules.alias_rows import FOLDER, AliasRowsRule, alias_name_index
from spacy_pel.pipeline.rules.name_rows import merge_candidates
from spacy_pel.retrieval.index import EntityIndex

# KB_LINES (conftest): D1 lithium carbonate, D2 tricuspid regurgitation, D3 atrial flutter, D4 aspirin, D5 warfarin
COUNTS = {"valve leak": {"D2": 3}, "heart flutter": {"D3": 1, "D5": 1}, "unknown thing": {"X9": 2}}
TEXT = "Li2CO3 toxicity , then heart flutter and tricuspid valve leak"
SPANS = ((0, 1, "Chemical"), (4, 6, "Disease"), (7, 10, "Disease"))


def _index_and_encoder(kb_dir):
    index = EntityIndex.from_disk(kb_dir)
    return index, BiEncoder.from_pretrained(index.encoder_source)


def test_one_row_per_form_and_kb_entity_and_each_form_finds_its_entity(kb_dir):
    index, encoder = _index_and_encoder(kb_dir)
    names = alias_name_index(COUNTS, encoder, index)
    # X9 is not in the KB: its form is left out; a form of two entities has two rows
    assert names.names == ["valve leak", "heart flutter", "heart flutter"]
    assert [index.entities.ids[r] for r in names.entity_rows] == ["D2", "D3", "D5"]
    queries = names.searcher.matrix[[0]].float().numpy()  # the form's own vector
    _, retrieved = index.search(queries, 2)
    scores, rows = merge_candidates(names, index.vectors, queries, retrieved, "max")
    assert index.entities.ids[rows[0, 0]] == "D2" and scores[0, 0] == pytest.approx(1.0, abs=0.02)
    assert len(set(rows[0].tolist())) == 2  # top-k, each entity once


def _docs(nlp):
    doc = nlp.make_doc(TEXT)
    doc.ents = [Span(doc, a, b, label=lab) for a, b, lab in SPANS]
    return [doc]


def _nlp(kb_dir, rules):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "rules": rules})
    return nlp


def _candidates(nlp):
    return [[(e.kb_id_, e._.pel_candidates) for e in d.ents] for d in nlp.pipe(_docs(nlp))]


def test_saved_with_the_pipeline_and_off_without_aliases(kb_dir, tmp_path):
    (tmp_path / "aliases.json").write_text(json.dumps(COUNTS))
    rule = {"@misc": "spacy_pel.rules.alias_rows.v1", "aliases": str(tmp_path / "aliases.json")}
    nlp = _nlp(kb_dir, {"alias_rows": rule})
    before = _candidates(nlp)
    assert before != _candidates(_nlp(kb_dir, {}))  # the forms' entities changed some candidates
    off = _nlp(kb_dir, {"alias_rows": {"@misc": "spacy_pel.rules.alias_rows.v1"}})
    assert _candidates(off) == _candidates(_nlp(kb_dir, {}))  # aliases null: nothing added
    nlp.to_disk(tmp_path / "p")
    assert (tmp_path / "p" / "pel_linker" / FOLDER / "vectors" / "embeddings.npy").exists()
    (tmp_path / "aliases.json").rename(tmp_path / "moved.json")  # the saved copy is read
    _assert_same_candidates(_candidates(spacy.load(tmp_path / "p")), before)


def test_aliases_null_at_load_turns_the_saved_forms_off(kb_dir, tmp_path):
    """The config is the source of truth: `aliases = null` for both alias rules at spacy.load links as a
    pipeline that never had the forms (their saved copies stay unread); no override keeps them."""
    (tmp_path / "aliases.json").write_text(json.dumps(COUNTS))
    forms = str(tmp_path / "aliases.json")
    rules = {"alias_rows": {"@misc": "spacy_pel.rules.alias_rows.v1", "aliases": forms},
             "aliases": {"@misc": "spacy_pel.rules.alias_table.v1", "aliases": forms}}
    nlp = _nlp(kb_dir, rules)
    with_forms = _candidates(nlp)
    nlp.to_disk(tmp_path / "p")
    without = _candidates(_nlp(kb_dir, {"alias_rows": {"@misc": "spacy_pel.rules.alias_rows.v1"},
                                        "aliases": {"@misc": "spacy_pel.rules.alias_table.v1"}}))
    assert with_forms != without
    off = {"components": {"pel_linker": {"rules": {"alias_rows": {"aliases": None}, "aliases": {"aliases": None}}}}}
    loaded = spacy.load(tmp_path / "p", config=off)
    assert loaded.get_pipe("pel_linker").rules["aliases"].counts is None
    _assert_same_candidates(_candidates(loaded), without)
    _assert_same_candidates(_candidates(spacy.load(tmp_path / "p")), with_forms)


def test_rules_that_hold_no_data_combine(kb_dir):
    """Two rules without saved data (label types, character n-grams) share the empty data name: no clash."""
    nlp = _nlp(kb_dir, {"types": {"@misc": "spacy_pel.rules.label_types.v1", "label_types": {"Disease": ["Disease"]}},
                        "ngrams": {"@misc": "spacy_pel.rules.char_ngrams.v1"}})
    assert len(_candidates(nlp)[0]) == 3


def _assert_same_candidates(got, expected):
    """The same ids in the same order, the scores equal to float noise (fp32 sums in another order move
    the 5th decimal on some CPUs)."""
    assert [[(kb_id, [c[:2] for c in cands]) for kb_id, cands in doc] for doc in got] == \
        [[(kb_id, [c[:2] for c in cands]) for kb_id, cands in doc] for doc in expected]
    scores = [c[2] for doc in got for _, cands in doc for c in cands]
    assert scores == pytest.approx([c[2] for doc in expected for _, cands in doc for c in cands], abs=1e-4)


def test_forms_are_encoded_again_for_another_encoder(kb_dir, other_tiny_bert, tmp_path):
    index, encoder = _index_and_encoder(kb_dir)
    (tmp_path / "aliases.json").write_text(json.dumps(COUNTS))
    rule = AliasRowsRule(str(tmp_path / "aliases.json"))
    rule.setup(encoder, index)
    mine = rule.names
    rule.setup(encoder, index)
    assert rule.names is mine  # same encoder and KB: kept
    other = BiEncoder.from_pretrained(str(other_tiny_bert))
    rule.setup(other, index)
    assert rule.names is not mine and rule.names.fingerprint == other.fingerprint()
    assert not np.allclose(rule.names.searcher.matrix.float().numpy(), mine.searcher.matrix.float().numpy())


def test_bad_settings_fail_when_the_rule_is_made(kb_dir):
    for bad in ({"mode": "min"}, {"aliases": 3}):
        with pytest.raises(ValueError, match="alias_rows"):
            _nlp(kb_dir, {"r": {"@misc": "spacy_pel.rules.alias_rows.v1", **bad}})
