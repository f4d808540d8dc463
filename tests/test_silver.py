"""Silver mentions (spacy_pel.training.silver): unambiguous KB names found in raw text, as linked mentions."""
from __future__ import annotations

import json
import random

import pytest
import spacy
from typer.testing import CliRunner

from spacy_pel.cli import silver as silver_cli
from spacy_pel.corpora import CorpusFormatError, gold_spans, read_docbin
from spacy_pel.kb import Entity
from spacy_pel.pipeline.updating import doc_gold_mentions
from spacy_pel.training.silver import NameMatcher, SilverStats, raw_texts, short_form_matches, silver_doc, silver_docs

NLP = spacy.blank("en")
ENTITIES = [
    Entity("C1", "Lithium Carbonate", ["lithium carbonate", "Carbonic acid, dilithium salt", "Eskalith"], ["Chemical"]),
    Entity("C2", "Puromycin Aminonucleoside", ["PAN"], ["Chemical"]),
    Entity("D1", "Atrial Fibrillation", ["auricular fibrillation", "AF"], ["Disease"]),
    Entity("D2", "Atrial Flutter", ["AF"], ["Disease"]),  # "AF" names two entities: never matched
    Entity("D3", "Fever", ["pyrexia", "the", "Was"], ["Disease"]),  # stop words, never matched
    Entity("D4", "Atrial Fibrillation, Familial", ["familial atrial fibrillation"], ["Disease"]),
]


def matcher(**kwargs) -> NameMatcher:
    return NameMatcher(ENTITIES, stop_words=NLP.Defaults.stop_words, **kwargs)


def matches(text: str, m: NameMatcher = None) -> list:
    doc = NLP.make_doc(text)
    return [(doc[s:e].text, entity) for s, e, entity in (m or matcher())(doc)]


def test_unique_names_match_case_folded_and_short_ones_as_written():
    assert matches("Given LITHIUM carbonate, AF and pyrexia followed; PAN but not pan.") == [
        ("LITHIUM carbonate", "C1"), ("pyrexia", "D3"), ("PAN", "C2")]


def test_the_longest_name_wins_and_punctuation_never_edges_a_mention():
    assert matches("familial atrial fibrillation (auricular fibrillation).") == [
        ("familial atrial fibrillation", "D4"), ("auricular fibrillation", "D1")]
    assert matches("the fever Was") == [("fever", "D3")]  # a stop-word name is no mention, as written either


def test_types_keep_only_those_entities():
    assert matches("Eskalith for atrial fibrillation", matcher(types=["Disease"])) == [("atrial fibrillation", "D1")]


def test_short_forms_defined_for_a_match_link_its_entity_after_the_definition():
    text = "AF before. Atrial Flutter (AF) and auricular fibrillation. Later AF, AFX and (AF) again; fever (XY) too."
    doc = NLP.make_doc(text)
    names = matcher()(doc)
    assert [(doc[s:e].text, entity) for s, e, entity in names] == [
        ("Atrial Flutter", "D2"), ("auricular fibrillation", "D1"), ("fever", "D3")]
    # "AF" names two KB entities, so only the definition decides: D2 here, from the parenthesis on, whole words
    # only ("AFX" is not one); no "XY": its letters do not fit "fever"
    assert [(doc[s:e].text, entity, s) for s, e, entity in short_form_matches(doc, names)] == [
        ("AF", "D2", 6), ("AF", "D2", 13), ("AF", "D2", 18)]
    stats = SilverStats()
    silver = silver_doc(NLP, text, matcher(short_forms=True), 0.0, random.Random(0), stats)
    assert stats.short_forms == 3 and [(s.text, s.kb_id_) for s in gold_spans(silver)].count(("AF", "D2")) == 3
    plain = silver_doc(NLP, text, matcher(), 0.0, random.Random(0), SilverStats())
    assert "AF" not in [s.text for s in gold_spans(plain)]  # off by default
    # a definition whose long form is not exactly a match teaches nothing
    other = NLP.make_doc("the fibrillation of atria (FA) and FA")
    assert short_form_matches(other, matcher()(other)) == []


def test_silver_mentions_sit_where_the_names_are_and_link_their_entity():
    stats = SilverStats()
    docs = list(silver_docs(NLP, ["No name here.", "Eskalith caused fever and Atrial Flutter."], matcher(),
                            stats=stats))
    assert len(docs) == 1 and stats.docs == 2 and stats.mentions == 3
    doc = docs[0]
    assert doc.text == "Eskalith caused fever and Atrial Flutter."  # no swap: the text as it was
    assert [(s.text, s.kb_id_, s.label_) for s in gold_spans(doc)] == [
        ("Eskalith", "C1", "ENTITY"), ("fever", "D3", "ENTITY"), ("Atrial Flutter", "D2", "ENTITY")]
    assert [m[3] for m in doc_gold_mentions(doc)] == ["C1", "D3", "D2"]  # what adapt's replay and train read


def test_swapped_mentions_name_the_same_entity_otherwise():
    m, stats = matcher(), SilverStats()
    text = "Eskalith caused pyrexia; auricular fibrillation followed."
    doc = silver_doc(NLP, text, m, 1.0, random.Random(0), stats)
    assert stats.swapped == 3 and doc.text != text
    for span in gold_spans(doc):
        assert span.text in m.names[span.kb_id_]  # one of the entity's running-text names ...
    assert [s.text for s in gold_spans(doc)] != ["Eskalith", "pyrexia", "auricular fibrillation"]  # ... another one
    assert "Carbonic acid, dilithium salt" not in m.names["C1"]  # inverted headings are not running text
    assert doc.text.endswith(" followed.") and "caused" in doc.text


def test_an_entity_gets_at_most_max_per_entity_mentions():
    stats = SilverStats()
    docs = list(silver_docs(NLP, ["fever and pyrexia and fever", "fever again"], matcher(), stats=stats,
                            max_per_entity=2))
    assert [[s.text for s in gold_spans(d)] for d in docs] == [["fever", "pyrexia"]]
    assert stats.capped == 2 and stats.entities["D3"] == 2


def test_raw_text_is_one_document_a_line_and_pubtator_is_read_as_a_corpus(tmp_path):
    plain = tmp_path / "abstracts.txt"
    plain.write_text("First abstract.\n\nSecond abstract.\n", encoding="utf8")
    assert list(raw_texts(NLP, plain)) == ["First abstract.", "Second abstract."]
    pubtator = tmp_path / "corpus.txt"
    pubtator.write_text("1|t|Fever after lithium.\n1|a|It passed.\n1\t0\t5\tFever\tDisease\tD3\n\n", encoding="utf8")
    assert list(raw_texts(NLP, pubtator)) == ["Fever after lithium. It passed."]


def test_the_command_writes_a_corpus_and_refuses_bad_input_in_one_line(tmp_path):
    kb = tmp_path / "kb.jsonl"
    kb.write_text("\n".join(json.dumps(e.to_dict()) for e in ENTITIES) + "\n", encoding="utf8")
    text = tmp_path / "abstracts.txt"
    text.write_text("Eskalith caused fever.\nNothing.\n", encoding="utf8")
    out = tmp_path / "silver.spacy"
    result = CliRunner().invoke(silver_cli.app, [str(text), "--kb", str(kb), "-o", str(out), "--types", "Disease"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["mentions"] == 1
    assert [(s.text, s.kb_id_) for d in read_docbin(NLP, out) for s in gold_spans(d)] == [("fever", "D3")]
    for args, message in (([str(text), "--kb", str(tmp_path / "no.jsonl"), "-o", str(out)], "KB not found"),
                          ([str(text), "--kb", str(kb), "-o", str(out), "--types", "Gene"], "no entity of the types Gene"),
                          ([str(text), "--kb", str(kb), "-o", str(out), "--swap", "2"], "--swap must be in")):
        result = CliRunner().invoke(silver_cli.app, args)
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    text.write_text("Nothing the KB names.\n", encoding="utf8")  # no mention found: an error, and nothing written
    result = CliRunner().invoke(silver_cli.app, [str(text), "--kb", str(kb), "-o", str(tmp_path / "none.spacy")])
    assert result.exit_code == 2 and "no name of" in result.output and not (tmp_path / "none.spacy").exists()
    result = CliRunner().invoke(silver_cli.app, [str(text), "--kb", str(kb), "-o", str(out)])  # over an earlier corpus
    assert result.exit_code == 2 and [s.kb_id_ for d in read_docbin(NLP, out) for s in gold_spans(d)] == ["D3"]  # kept


def silver_run(tmp_path, *texts, extra=()):
    """Run the command on ``texts`` with the test KB: the CliRunner result."""
    kb = tmp_path / "kb.jsonl"
    kb.write_text("\n".join(json.dumps(e.to_dict()) for e in ENTITIES) + "\n", encoding="utf8")
    out = tmp_path / "out.spacy"
    return CliRunner().invoke(silver_cli.app, [*map(str, texts), "--kb", str(kb), "-o", str(out), *extra]), out


def one_line(result, fragment):
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr
    return lines[0]


def test_a_text_line_that_is_not_utf8_is_one_line_naming_file_and_line_or_skipped(tmp_path):
    text = tmp_path / "latin1.txt"
    text.write_bytes("Eskalith caused fever.\nAspirin caf\u00e9 latin1.\n".encode("latin-1"))
    result, out = silver_run(tmp_path, text)
    one_line(result, f"{text}:2: not UTF-8 text")
    assert not out.exists()
    result, out = silver_run(tmp_path, text, extra=["--skip-bad-lines"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["docs"] == 1 and report["skipped_lines"] == 1 and f"{text}:2:" in report["skipped_examples"][0]


def test_a_byte_order_mark_is_no_part_of_the_text(tmp_path):
    text = tmp_path / "bom.txt"
    text.write_bytes("\ufeffEskalith caused fever.\nAnd pyrexia.\n".encode("utf8"))
    assert list(raw_texts(NLP, text)) == ["Eskalith caused fever.", "And pyrexia."]
    docs = list(silver_docs(NLP, raw_texts(NLP, text), matcher()))
    assert [s.text for s in gold_spans(docs[0])] == ["Eskalith", "fever"]
    pubtator = tmp_path / "bompub.txt"  # a PubTator file with a mark is still read as PubTator
    pubtator.write_bytes("\ufeff1|t|Fever after lithium.\n1|a|It passed.\n".encode("utf8"))
    assert list(raw_texts(NLP, pubtator)) == ["Fever after lithium. It passed."]


def test_a_text_file_without_text_is_refused_as_a_corpus_without_documents_is(tmp_path):
    for name, content in (("empty.txt", ""), ("blank.txt", "\n  \n\t\n")):
        blank = tmp_path / name
        blank.write_text(content, encoding="utf8")
        with pytest.raises(CorpusFormatError, match="no text in this file"):
            list(raw_texts(NLP, blank))
        good = tmp_path / "good.txt"
        good.write_text("Eskalith caused fever.\n", encoding="utf8")
        message = one_line(silver_run(tmp_path, good, blank)[0], f"{blank}:1: no text in this file")
        assert "PubTator" not in message


def test_an_output_that_is_a_folder_is_refused_before_any_work(tmp_path, monkeypatch):
    text = tmp_path / "texts.txt"
    text.write_text("Eskalith caused fever.\n", encoding="utf8")
    (tmp_path / "out.spacy").mkdir()
    monkeypatch.setattr(silver_cli, "read_kb", lambda *a, **k: pytest.fail("KB read before checking the output"))
    message = one_line(silver_run(tmp_path, text)[0], f"{tmp_path / 'out.spacy'}")
    assert "folder" in message and ".tmp-" not in message
