"""Prodigy JSONL input (spacy_pel.prodigy_corpus): spaCy's entity-linking tutorial annotations, tasks of
one text joined into one document, rejected tasks counted, NIL options, spans with their own ids, and
every malformed task refused as FILE:LINE."""
import json
import re
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import spacy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from spacy_pel.corpora import NIL, CorpusFormatError, gold_spans, make_doc, read_docbin
from spacy_pel.corpus_formats import convert_corpora, corpus_format
from spacy_pel.files import BadLines
from spacy_pel.prodigy_corpus import read_prodigy

from .conftest import shared

NLP = spacy.blank("en")
TEXT = "Emerson met Emerson."


def input_hash(text: str) -> int:
    return sum(map(ord, text))  # Prodigy's is a hash of the text: any number one text always gets


def task(spans, accept=None, answer="accept", text=TEXT, **more) -> str:
    record = {"text": text, "_input_hash": input_hash(text), "spans": spans, "answer": answer, **more}
    if accept is not None:
        record["accept"] = accept
    return json.dumps(record)


def write(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf8")
    return path


def test_spacy_tutorial_annotations(tmp_path):
    source = shared("nel-emerson", "emerson_annotated_text.jsonl")
    assert corpus_format(source) == "prodigy"
    stats = convert_corpora([source], tmp_path / "emerson.spacy")
    assert (stats["docs"], stats["mentions"], stats["nil"], stats["unaligned"]) == (30, 30, 0, 0)
    docs = read_docbin(NLP, tmp_path / "emerson.spacy")
    spans = [s for d in docs for s in gold_spans(d)]
    assert {s.text for s in spans} == {"Emerson"}
    assert Counter(s.kb_id_ for s in spans) == {"Q312545": 10, "Q48226": 10, "Q215952": 10}
    # each document is its task's text, the mention where the task's span says
    tasks = [json.loads(line) for line in source.read_text(encoding="utf8").splitlines()]
    assert [d.text for d in docs] == [t["text"] for t in tasks]
    assert [(s.start_char, s.kb_id_) for s in spans] == [(t["spans"][0]["start"], t["accept"][0]) for t in tasks]


def test_tasks_of_one_text_are_one_document(tmp_path):
    path = write(tmp_path,
                 task([{"start": 0, "end": 7, "label": "PERSON"}], ["Q1"]),
                 task([{"start": 12, "end": 19, "label": "PERSON", "text": "Emerson"}], ["NIL_otherLink"]),
                 task([{"start": 12, "end": 19}], ["Q2"], answer="reject"),
                 task([{"start": 0, "end": 7}], ["Q3"], answer="ignore"),
                 task([{"start": 0, "end": 7, "kb_id": "Q9"}], text="Emerson again"),
                 task([{"start": 0, "end": 7}], ["Q1", "Q4"], text="Emerson twice."))
    left_out = {}
    docs = read_prodigy(path, left_out=left_out)
    assert left_out == {"reject": 1, "ignore": 1}
    assert [(d.text, [(a.start, a.type, a.ids, a.line) for a in d.annotations]) for d in docs] == [
        (TEXT, [(0, "PERSON", ["Q1"], 1), (12, "PERSON", [NIL], 2)]),
        ("Emerson again", [(0, "ENTITY", ["Q9"], 5)]),
        ("Emerson twice.", [(0, "ENTITY", ["Q1", "Q4"], 6)]),
    ]


@pytest.mark.parametrize("line, fragment", [
    ('{"text": "x", "spans": [', "invalid JSON"),
    ("[1, 2]", "a line must be a JSON object"),
    (task([], text=""), 'a task needs a non-empty "text"'),
    (task([{"start": 0, "end": 30}], ["Q1"]), "span 0-30 is not within the text (0-20)"),
    (task([{"start": "0", "end": 7}], ["Q1"]), "is not within the text"),
    (task([{"start": 0, "end": 7, "text": "Emersen"}], ["Q1"]), "says 'Emersen', the text there is 'Emerson'"),
    (task([{"start": 0, "end": 7}]), "has no id: neither a \"kb_id\" nor an accepted option"),
    (task([{"start": 0, "end": 7}, {"start": 12, "end": 19}], ["Q1"]), "2 spans share the accepted option"),
    (task([{"start": 0, "end": 7}], ["Q1", "NIL_ambiguous"]), "accepts a NIL option beside entities"),
    (task([{"start": 0, "end": 7}], ["Q2"]), "linked to Q2 here and to Q1 at line 1"),
    (task([{"start": 0, "end": 7}], ["Q1"], _input_hash=input_hash(TEXT), text="Other text"), "names another text too"),
    (task([{"start": 0, "end": 7, "label": 3}], ["Q1"]), "a label that is not a string"),
    (task([{"start": 0, "end": 7}], [{"id": "Q1"}]), "an id must be a string (or a number), not {'id': 'Q1'}"),
    (task([{"start": 0, "end": 7, "kb_id": ["Q1"]}]), "an id must be a string"),
    (task([{"start": 0, "end": 7}], ["Q1"], _input_hash=[1]), "_input_hash must be a number, not [1]"),
])
def test_malformed_tasks_name_their_line(tmp_path, line, fragment):
    path = write(tmp_path, task([{"start": 0, "end": 7}], ["Q1"]), line)
    with pytest.raises(CorpusFormatError) as err:
        read_prodigy(path)
    assert str(err.value).startswith(f"{path}:2: ") and fragment in str(err.value), str(err.value)


def test_skip_bad_lines_keeps_the_rest(tmp_path):
    path = write(tmp_path, task([{"start": 0, "end": 7}], ["Q1"]), "{", task([{"start": 12, "end": 19}], ["Q2"]))
    bad = BadLines()
    (doc,) = read_prodigy(path, bad)
    assert [a.ids for a in doc.annotations] == [["Q1"], ["Q2"]] and bad.count == 1 and "c.jsonl:2: invalid JSON" in bad.examples[0]
    with pytest.raises(CorpusFormatError, match="no accepted Prodigy tasks"):
        read_prodigy(write(tmp_path, task([{"start": 0, "end": 7}], ["Q1"], answer="reject")))


def test_tasks_of_one_text_but_other_doc_ids_are_other_documents(tmp_path):
    """What ``link --output-format prodigy`` writes, after Prodigy hashed each task's text (one hash for both)."""
    path = write(tmp_path, task([{"start": 0, "end": 7}], ["Q1"], meta={"doc_id": "d1"}),
                 task([{"start": 12, "end": 19}], ["Q2"], meta={"doc_id": "d2"}),
                 task([{"start": 12, "end": 19}], ["Q3"], meta={"doc_id": "d1"}))
    docs = read_prodigy(path)
    assert [(d.pmid, d.text, [(a.start, a.ids) for a in d.annotations]) for d in docs] == [
        ("d1", TEXT, [(0, ["Q1"]), (12, ["Q3"])]), ("d2", TEXT, [(12, ["Q2"])])]


LINKED = {"id": "r1", "text": TEXT, "mentions": [
    {"start_char": 0, "end_char": 7, "text": "Emerson", "label": "PERSON", "kb_id": "Q1", "score": 0.9, "candidates": []},
    {"start_char": 12, "end_char": 19, "text": "Emerson", "label": "PERSON", "kb_id": "NIL", "score": None}]}


def test_links_jsonl_output_is_read_one_document_a_line(tmp_path):
    path = write(tmp_path, json.dumps(LINKED), json.dumps({"id": 7, "text": "", "mentions": []}))
    docs = read_prodigy(path)
    assert [(d.pmid, d.text, [(a.start, a.end, a.type, a.ids, a.line) for a in d.annotations]) for d in docs] == [
        ("r1", TEXT, [(0, 7, "PERSON", ["Q1"], 1), (12, 19, "PERSON", [NIL], 1)]), ("7", "", [])]
    for line, fragment in [(json.dumps(LINKED), "document r1 appears twice (first at line 1)"),
                           (json.dumps(dict(LINKED, id="")), 'needs an "id"'),
                           (json.dumps(dict(LINKED, id="r2", mentions=[dict(LINKED["mentions"][0], end_char=30)])),
                            "span 0-30 is not within the text"),
                           (json.dumps(dict(LINKED, id="r2", mentions=[dict(LINKED["mentions"][0], kb_id="")])), "has no id"),
                           (json.dumps(dict(LINKED, id="r2", mentions={})), '"mentions" must be a list')]:
        with pytest.raises(CorpusFormatError) as err:
            read_prodigy(write(tmp_path, json.dumps(LINKED), line))
        assert str(err.value).startswith(f"{path}:2: ") and fragment in str(err.value), str(err.value)


def test_convert_refuses_a_document_an_earlier_input_had(tmp_path, caplog):
    from typer.testing import CliRunner

    from spacy_pel.cli.convert import app
    from spacy_pel.files import InputError

    one = tmp_path / "one.txt"
    one.write_text("21|t|a and b.\n21|a|Nothing.\n21\t0\t1\ta\tChemical\tD1\n\n22|t|c.\n22|a|d.\n", encoding="utf8")
    other = tmp_path / "other.txt"
    other.write_text("23|t|e.\n23|a|f.\n\n21|t|a and b.\n21|a|Nothing.\n", encoding="utf8")
    with pytest.raises(InputError, match=rf"other.txt: document 21 is in an earlier input too \({re.escape(str(one))}\)"):
        convert_corpora([one, other], tmp_path / "x.spacy")
    stats = convert_corpora([one, other], tmp_path / "x.spacy", skip_bad_lines=True)
    assert (stats["docs"], stats["mentions"], stats["skipped_lines"]) == (3, 1, 1) and "document 21" in stats["skipped_examples"][0]
    result = CliRunner().invoke(app, [str(one), str(tmp_path / "x.spacy"), str(one), str(tmp_path / "y.spacy")])
    assert result.exit_code != 0 and len(result.stderr.strip().splitlines()) == 1 and "earlier input" in result.stderr
    with pytest.raises(InputError, match=r"one.txt: document 21 is in an earlier input too \(.*x.spacy\)"):  # a .spacy input's ids too
        convert_corpora([tmp_path / "x.spacy", one], tmp_path / "z.spacy")
    named = write(tmp_path, task([{"start": 0, "end": 7}], ["Q1"], meta={"doc_id": "d1"}))
    with pytest.raises(InputError, match="document d1 is in an earlier input too"):
        convert_corpora([named, named], tmp_path / "z.spacy")
    unnamed = write(tmp_path, task([{"start": 0, "end": 7}], ["Q1"]))  # Prodigy's: no id but a hash of the text
    assert convert_corpora([unnamed, unnamed], tmp_path / "z.spacy")["docs"] == 2  # kept: other labels, other dataset
    assert "have the text of one in an earlier input" in caplog.text


set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "spacy_pel_hypothesis")
SETTINGS = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
GOOD = "\n".join([task([{"start": 0, "end": 7, "label": "PERSON"}], ["Q1"]), task([{"start": 12, "end": 19, "kb_id": "Q2"}]),
                  json.dumps(LINKED)])
PIECES = ['"start": ', '"end": ', '"start_char": ', '"mentions": ', '"id": ', "12", "-1", '"kb_id": ', '"accept": ', '["NIL"]', "[", "]", "{", "}", ",", '"', "\\u", "\n", "null"]


def check_reader(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.jsonl"
        path.write_bytes(data)
        for bad_lines in (None, BadLines()):
            try:
                docs = read_prodigy(path, bad_lines)
            except CorpusFormatError as err:
                assert str(err).startswith(f"{path}:") and 1 <= err.line <= data.count(b"\n") + 1, str(err)
            else:
                for pdoc in docs:
                    for ann in pdoc.annotations:
                        assert pdoc.text[ann.start : ann.end] == ann.text and ann.ids
                    make_doc(NLP, pdoc)


@SETTINGS
@given(data=st.binary(max_size=300))
def test_random_bytes_raise_only_corpus_format_errors(data):
    check_reader(data)


@SETTINGS
@given(data=st.data())
def test_mutated_tasks_raise_only_corpus_format_errors(data):
    text = GOOD
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 12)))
        text = text[:i] + data.draw(st.sampled_from(PIECES) | st.text(max_size=4)) + text[j:]
    check_reader(text.encode("utf8", "surrogatepass"))


def test_one_span_of_two_labels_is_two_mentions(tmp_path):
    """Defect: mentions were keyed by their span alone, so link's review tasks for a span annotated Chemical
    and Drug (one task each) were read back as one mention, the other dropped without a count."""
    path = write(tmp_path, task([{"start": 0, "end": 7, "label": "PERSON"}], ["Q1"]),
                 task([{"start": 0, "end": 7, "label": "AUTHOR"}], ["Q1"]),
                 task([{"start": 0, "end": 7, "label": "AUTHOR"}], ["Q1"]))  # the same mention twice: once
    (doc,) = read_prodigy(path)
    assert [(a.start, a.end, a.type, a.ids) for a in doc.annotations] == [(0, 7, "PERSON", ["Q1"]), (0, 7, "AUTHOR", ["Q1"])]
