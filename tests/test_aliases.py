import json
import logging

import numpy as np
import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli.aliases import app as aliases_app
from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.kb import Entity
from spacy_pel.pipeline.aliases import (
    AliasTable,
    mention_counts,
    normalize,
    read_aliases,
    write_aliases,
)
from spacy_pel.pipeline.rules.alias_table import alias_table_rule
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.index import EntityIndex

TEXT = "Li2CO3 toxicity , then atrial-flutter and tricuspid valve leak"
SPANS = ((0, 1, "Chemical"), (4, 7, "Disease"), (8, 11, "Disease"))


def test_normalize():
    assert normalize("Atrial-Flutter") == normalize("atrial  flutter") == "atrial flutter"
    assert normalize(" Li2CO3. ") == "li2co3"
    # decomposed accents (macOS, PDF text): "o" + U+0308 was cut into "sjo gren"
    assert normalize("Sjo\u0308gren Syndrome") == normalize("Sj\u00f6gren syndrome") == "sj\u00f6gren syndrome"
    # a soft hyphen, zero-width space or BOM inside a word (PDF and web text) does not split it
    assert normalize("anti\u00adbiotic ag\u200bent\ufeff") == normalize("antibiotic agent") == "antibiotic agent"
    assert normalize("anti\u2010biotic") == "anti biotic"  # a visible hyphen still separates


def test_kb_names_put_the_named_entity_first_and_leave_others_alone(kb_dir):
    index = EntityIndex.from_disk(kb_dir)
    table = AliasTable(index)
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(3, index.embeddings.shape[1])).astype(np.float32)
    scores, rows = index.search(vectors, 3)
    texts = ["Li2CO3", "atrial-flutter", "tricuspid valve leak"]  # synonym, name, neither
    s2, r2 = table.restrict(texts, vectors, scores, rows)
    assert index.entities[r2[0, 0]].id == "D1" and index.entities[r2[1, 0]].id == "D3"
    assert (r2[2] == rows[2]).all() and (s2[2] == scores[2]).all()  # no name matched: ranking stands
    for i in range(2):  # the chosen entity's own score; the others follow in retrieval order, no repeats
        own = float(index.embeddings[r2[i, 0]].astype(np.float32) @ vectors[i])
        assert s2[i, 0] == pytest.approx(own, abs=1e-3)
        assert len(set(r2[i])) == 3 and list(r2[i, 1:]) == [r for r in rows[i] if r != r2[i, 0]][:2]


def test_train_surface_forms_win_over_kb_names(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    doc = nlp.make_doc("flutter again and flutter and flutter")
    doc.spans[GOLD_KEY] = [Span(doc, 0, 1, label="D", kb_id="D2"), Span(doc, 3, 4, label="D", kb_id="D2"),
                           Span(doc, 5, 6, label="D", kb_id="D3|D5")]
    counts = mention_counts([doc])
    assert counts == {"flutter": {"D2": 2, "D3": 1, "D5": 1}}
    write_aliases(counts, tmp_path / "a.json")
    assert read_aliases(tmp_path / "a.json") == counts
    index = EntityIndex.from_disk(kb_dir)
    table = AliasTable(index, counts)
    assert [index.entities[r].id for r in table.candidates("Flutter")] == ["D2"]  # most frequent in text
    assert [index.entities[r].id for r in AliasTable(index).candidates("Flutter")] == ["D3"]  # the KB synonym


def test_bad_aliases_file_names_it(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": {"D1": 1},\n oops}', encoding="utf8")
    with pytest.raises(ValueError, match=r"bad.json:2"):
        read_aliases(bad)
    bad.write_text(json.dumps({"x": 3}), encoding="utf8")
    with pytest.raises(ValueError, match="surface"):
        read_aliases(bad)


def test_linker_alias_rule_and_roundtrip(kb_dir, tmp_path):
    counts = {"tricuspid valve leak": {"D2": 3}}
    write_aliases(counts, tmp_path / "aliases.json")
    nlp = spacy.blank("en")
    rule = {"@misc": "spacy_pel.rules.alias_table.v1", "aliases": str(tmp_path / "aliases.json")}
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "rules": {"aliases": rule}})
    doc = nlp.make_doc(TEXT)
    doc.ents = [Span(doc, a, b, label=l) for a, b, l in SPANS]
    ids = [e.kb_id_ for e in nlp(doc).ents]
    assert ids == ["D1", "D3", "D2"]
    assert [e._.pel_candidates[0][0] for e in doc.ents] == ids
    nlp.to_disk(tmp_path / "pipe")
    assert (tmp_path / "pipe" / "pel_linker" / "aliases.json").exists()
    (tmp_path / "aliases.json").unlink()  # the saved pipeline carries its own copy
    again = spacy.load(tmp_path / "pipe")
    doc2 = again.make_doc(TEXT)
    doc2.ents = [Span(doc2, a, b, label=l) for a, b, l in SPANS]
    assert [e.kb_id_ for e in again(doc2).ents] == ids


def _link(nlp, texts_spans):
    docs = []
    for text, spans in texts_spans:
        doc = nlp.make_doc(text)
        doc.ents = [Span(doc, a, b, label=l) for a, b, l in spans]
        docs.append(doc)
    return [[(e.kb_id_, e._.pel_candidates) for e in d.ents] for d in nlp.pipe(docs)]


def test_decided_mentions_skip_the_encoder_with_the_same_ids(kb_dir, tmp_path, monkeypatch):
    """decide_unique: a mention whose text allows one entity is linked without encoding it; the
    kb_ids equal those of encoding everything, and only the open mentions reach the encoder."""
    from spacy_pel.models.encoder import BiEncoder
    from spacy_pel.pipeline.rules.batch import DECIDED_SCORE

    write_aliases({"tricuspid valve leak": {"D2": 3}}, tmp_path / "aliases.json")
    docs = [
        (TEXT, SPANS),  # Li2CO3 (KB name), atrial-flutter (KB synonym), a training surface form
        ("aspirin or warfarin , then something else ( SE ) and SE again", ((0, 1, "C"), (2, 3, "C"), (5, 7, "D"), (8, 9, "D"), (11, 12, "D"))),
    ]
    encoded = []
    original = BiEncoder.encode_mentions

    def counting(self, mentions, **kw):
        encoded.extend(m.text[m.start : m.end] for m in mentions)
        return original(self, mentions, **kw)

    monkeypatch.setattr(BiEncoder, "encode_mentions", counting)
    results = {}
    for decide in (False, True):
        nlp = spacy.blank("en")
        rules = {
            "abbreviations": {"@misc": "spacy_pel.rules.abbreviations.v1"},
            "aliases": {"@misc": "spacy_pel.rules.alias_table.v1", "aliases": str(tmp_path / "aliases.json"), "decide_unique": decide},
        }
        nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "rules": rules})
        encoded.clear()
        results[decide] = (_link(nlp, docs), list(encoded))
    (everything, all_encoded), (skipped, few_encoded) = results[False], results[True]
    assert [[i for i, _ in d] for d in skipped] == [[i for i, _ in d] for d in everything]
    assert [i for i, _ in skipped[0]] == ["D1", "D3", "D2"]
    # everything but the defined short form "SE" (tied to its long form) went through the encoder before
    assert sorted(all_encoded) == sorted(["Li2CO3", "atrial-flutter", "tricuspid valve leak", "aspirin", "warfarin", "something else"])
    assert sorted(few_encoded) == ["something else"]  # the only mention no rule decides
    for doc in skipped:
        for kb_id, cands in doc[:3] if doc is skipped[0] else doc[:2]:
            assert cands == [[kb_id, cands[0][1], DECIDED_SCORE]]
    assert skipped[1][3] == skipped[1][2] and skipped[1][4] == skipped[1][2]  # SE takes its long form's result


def test_code_names_match_without_their_spaces():
    """A text with a digit that is no KB name is looked up without spaces, both ways; words are not."""
    entities = [Entity("C1", "KF 17837", [], ["Chemical"]), Entity("C2", "UMB24", [], ["Chemical"]),
                Entity("C3", "heart attack", [], ["Disease"])]
    index = EntityIndex(entities, np.eye(3, 4, dtype=np.float32), metric="ip", fingerprint="x")
    table = AliasTable(index)
    assert table.candidates("KF17837") == [0] and table.candidates("KF 17837") == [0]
    assert table.candidates("UMB 24") == [1]  # the KB name has no space, the text has one
    assert table.candidates("heartattack") is None and table.candidates("KF1783") is None


def test_name_ties_fewest_names_prefers_an_entitys_own_name_over_a_headings_gathered_synonym(tmp_path, tiny_encoder_dir):
    lines = ['{"id": "OMIM:1", "name": "Schwartz-Jampel syndrome, type 1", "aliases": ["SJS", "SJS1"]}',
             '{"id": "D9", "name": "Osteochondrodysplasias", "aliases": ["SJS", "SJS1", "Dyschondroplasia", '
             '"Multiple Epiphyseal Dysplasia", "Van Buchem Disease"]}',
             '{"id": "D8", "name": "Dyschondroplasia", "aliases": ["Ollier disease"]}',
             '{"id": "D7", "name": "Enchondromatosis", "aliases": ["Ollier disease"]}']
    (tmp_path / "kb.jsonl").write_text("\n".join(lines) + "\n", encoding="utf8")
    build_kb(tmp_path / "kb.jsonl", tmp_path / "kb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    index = EntityIndex.from_disk(tmp_path / "kb")

    def ids(table, text):
        return sorted(index.entities[r].id for r in table.candidates(text))

    by_score, fewest = AliasTable(index), AliasTable(index, name_ties="fewest_names")
    assert ids(by_score, "SJS") == ["D9", "OMIM:1"] and ids(fewest, "SJS") == ["OMIM:1"]  # 3 names against 6
    assert ids(by_score, "dyschondroplasia") == ["D8", "D9"]
    assert ids(fewest, "dyschondroplasia") == ["D8"]  # its own name (2 names) before the heading's synonym
    assert ids(fewest, "Ollier disease") == ["D7", "D8"]  # equal counts: both stay, the score decides
    assert ids(AliasTable(index, {"sjs": {"D9": 1}}, name_ties="fewest_names"), "SJS") == ["D9"]  # annotated text wins
    with pytest.raises(ValueError, match="name_ties"):
        AliasTable(index, name_ties="fewest")
    with pytest.raises(ValueError, match="name_ties"):
        alias_table_rule(name_ties="shortest")
    rule = alias_table_rule(name_ties="fewest_names")
    rule.setup(None, index)
    assert ids(rule.table, "SJS") == ["OMIM:1"]


def test_an_alias_table_made_for_another_kb_is_said(kb_dir, caplog):
    """A table whose surface forms name ids the KB lacks is not used (ids absent from the KB never link);
    when almost none of them resolve, the table is of another KB and the user hears it once."""
    index = EntityIndex.from_disk(kb_dir)
    foreign = {f"form {i}": {f"OTHER:{i}": 1} for i in range(25)}
    with caplog.at_level(logging.WARNING, logger="spacy_pel"):
        table = AliasTable(index, foreign)
    assert table.seen == {} and "25 of its 25 surface forms name only ids this KB" in caplog.text
    caplog.clear()
    ours = {**foreign, **{f"own {i}": {index.entities[0].id: 1} for i in range(5)}}  # 5 of 30 resolve: a KB release
    with caplog.at_level(logging.WARNING, logger="spacy_pel"):
        assert len(AliasTable(index, ours).seen) == 5
    assert "alias table" not in caplog.text


@pytest.mark.parametrize("gold, why", [((), "no gold mentions"), (((0, 1, "Chemical", "NIL"),), "1 gold mentions are all NIL"),
                                       (None, "no gold mentions")])
def test_cli_warns_when_the_table_comes_out_empty(tmp_path, gold, why):
    """An empty table is written (exit 0) but said: a corpus without gold ids was most likely the wrong file."""
    nlp = spacy.blank("en")
    docs = []
    if gold is not None:  # None: a corpus without documents
        doc = nlp.make_doc(TEXT)
        doc.spans[GOLD_KEY] = [Span(doc, a, b, label, kb_id=kb) for a, b, label, kb in gold]
        docs.append(doc)
    write_docbin(docs, tmp_path / "c.spacy")
    result = CliRunner().invoke(aliases_app, [str(tmp_path / "c.spacy"), "-o", str(tmp_path / "aliases.json")])
    assert result.exit_code == 0, result.output
    assert "warning:" in result.stderr and why in result.stderr and "alias table is empty" in result.stderr
    assert json.loads((tmp_path / "aliases.json").read_text()) == {}
    doc = nlp.make_doc(TEXT)
    doc.spans[GOLD_KEY] = [Span(doc, 0, 1, "Chemical", kb_id="D1")]
    write_docbin([doc], tmp_path / "c.spacy")
    result = CliRunner().invoke(aliases_app, [str(tmp_path / "c.spacy"), "-o", str(tmp_path / "aliases.json")])
    assert result.exit_code == 0 and "warning" not in result.stderr


def test_an_alias_table_written_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "aliases.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"lithium": {"D1": 2}}).encode())
    assert read_aliases(path) == {"lithium": {"D1": 2}}
