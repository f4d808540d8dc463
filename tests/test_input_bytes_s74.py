"""Input bytes and sizes (hMM bug01–bug08): a raw text over nlp.max_length, lines before a bulk PubTator shard's
first title, KB ids holding a tab or a line break, lone surrogates in JSON corpora, an id map with CR line ends,
a label-types map that is not UTF-8, a lone CR in csv / tsv KBs, and the char_ngrams rule's Unicode composition."""
import json
import unicodedata

import pytest
from typer.testing import CliRunner

from spacy_pel.bioc_corpus import BioCFormatError, read_bioc
from spacy_pel.bulk.linked_formats import LinkedDoc, write_linked
from spacy_pel.bulk.shards import Shard, plan_chunks, read_chunk
from spacy_pel.cli import app
from spacy_pel.corpora import CorpusFormatError, read_pubtator
from spacy_pel.files import BadLines, InputError
from spacy_pel.id_map import IdMapError, read_id_map
from spacy_pel.kb import KBFormatError, read_kb
from spacy_pel.pipeline.label_map import read_label_types
from spacy_pel.pipeline.rules.char_ngrams import ngram_cosine
from spacy_pel.prodigy_corpus import read_prodigy

from .test_link_files import save_pipeline

SURROGATE_TEXT = "Aspirin \ud800 toxicity."  # "\ud800" in JSON: valid syntax, no Unicode text


# ---------------------------------------------------------------- bug01: link on raw text over nlp.max_length
def test_link_refuses_raw_text_over_max_length_in_one_line_naming_the_document(kb_dir, tmp_path):
    pipeline = save_pipeline(kb_dir, tmp_path / "with_ner", True)
    raw = tmp_path / "raw.jsonl"
    raw.write_text(json.dumps({"id": "small", "text": "aspirin"}) + "\n"
                   + json.dumps({"id": "big", "text": "Aspirin and warfarin. " + "x" * 1_000_000}) + "\n")
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["link", str(raw), str(out), "--pipeline", str(pipeline), "--no-progress"])
    assert result.exit_code == 2, result.output
    assert not isinstance(result.exception, ValueError)  # was spaCy's E088 as a traceback
    assert f"error: {raw}:2: text of 1000022 characters exceeds the pipeline's nlp.max_length (1000000)" in result.output
    assert "--max-length" in result.output and not out.exists()
    # --max-length sets the limit of the run: a smaller one refuses a shorter text, given mentions are not checked
    result = CliRunner().invoke(app, ["link", str(raw), str(out), "--pipeline", str(pipeline), "--max-length", "5"])
    assert result.exit_code == 2 and f"{raw}:1: text of 7 characters exceeds the pipeline's nlp.max_length (5)" in result.output
    given = tmp_path / "given.pubtator"
    given.write_text("1|t|Aspirin and warfarin.\n1|a|none\n1\t0\t7\tAspirin\tChemical\tD4\n")
    result = CliRunner().invoke(app, ["link", str(given), str(out), "--pipeline", str(pipeline), "--max-length", "5",
                                      "--no-progress"])
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------- bug02: bulk PubTator lines before the first title
@pytest.mark.parametrize("name,data,docs,error", [
    ("raw_lines.txt", b"Aspirin and warfarin.\nLithium carbonate toxicity.\n", 0, ":1: expected a PMID|t| title"),
    ("orphan.txt", b"\n2|a|an abstract whose title is missing\n1|t|Aspirin\n1|a|warfarin.\n1\t0\t7\tAspirin\tChemical\tD4\n",
     1, ":2: abstract of 2 without its title line"),
    ("stray.pubtator", b"\xef\xbb\xbf3\t0\t7\tAspirin\tChemical\tD4\n1|t|Aspirin\n1|a|warfarin.\n", 1,
     ":1: annotation outside its document"),
])
def test_bulk_pubtator_lines_before_the_first_title_are_an_error_item(tmp_path, name, data, docs, error):
    path = tmp_path / name
    path.write_bytes(data)
    for chunk_docs in (1, 1000):
        chunks = plan_chunks(Shard(str(path), name, "pubtator"), chunk_docs)
        items = [item for chunk in chunks for item in read_chunk(chunk.as_item())]
        assert [i["seq"] for i in items] == list(range(docs + 1))
        errors = [i["error"] for i in items if i["error"]]
        assert len(errors) == 1 and errors[0].startswith(f"{path}{error}"), errors
        assert sum(not i["error"] for i in items) == docs
    with pytest.raises(CorpusFormatError, match=f"{name}{error.replace('|', '.')}"):  # as link reads it
        read_pubtator(path)


def test_bulk_pubtator_blank_lines_and_a_bom_before_the_first_title_are_no_error(tmp_path):
    path = tmp_path / "ok.txt"
    path.write_bytes(b"\xef\xbb\xbf\n\n1|t|Aspirin\n1|a|warfarin.\n1\t0\t7\tAspirin\tChemical\tD4\n")
    items = [i for c in plan_chunks(Shard(str(path), "ok.txt", "pubtator"), 10) for i in read_chunk(c.as_item())]
    assert [(i["doc_id"], i["error"]) for i in items] == [("1", "")]


# ---------------------------------------------------------------- bug03: KB ids holding a tab or a line break
@pytest.mark.parametrize("line", ['{"id": "X\\t1", "name": "aspirin"}', '{"id": "Y\\n2", "name": "aspirin"}',
                                  '{"id": "Z\\r3", "name": "aspirin"}', '{"id": "W\\u20284", "name": "aspirin"}',
                                  '{"id": "V\\u00855", "name": "aspirin"}',
                                  '{"id": "D1", "name": "aspirin", "extra": {"alt_ids": ["OLD\\t1"]}}'])
def test_kb_ids_with_control_or_line_breaking_characters_are_refused(tmp_path, line):
    path = tmp_path / "kb.jsonl"
    path.write_text('{"id": "D0", "name": "warfarin"}\n' + line + "\n")
    with pytest.raises(KBFormatError, match=r"kb\.jsonl:2: .*control or line-breaking character"):
        read_kb(path, "jsonl")


def test_csv_kb_id_with_a_tab_in_a_quoted_cell_is_refused(tmp_path):
    path = tmp_path / "kb.csv"
    path.write_text('id,name\n"Z\t3",lithium\n')
    with pytest.raises(KBFormatError, match=r"kb\.csv:2: entity id 'Z\\t3' holds '\\t'"):
        read_kb(path, "csv")


@pytest.mark.parametrize("kb_id", ["X\t1", "Y\n2"])
def test_pubtator_output_refuses_an_entity_id_it_cannot_hold(tmp_path, kb_id):
    row = {"doc_id": "1", "start_char": 0, "end_char": 7, "text": "aspirin", "label": "Chemical", "kb_id": kb_id,
           "score": 0.9, "confidence": 0.9, "candidates": [{"id": kb_id, "name": "aspirin", "score": 0.9}]}
    out = tmp_path / "linked.pubtator"
    with pytest.raises(InputError, match="cannot be written in PubTator"):
        write_linked([LinkedDoc("1", "aspirin warfarin", 7, [row])], out, "pubtator")
    assert not out.exists()


# ---------------------------------------------------------------- bug04: lone surrogates in JSON corpora
def _bioc(text=SURROGATE_TEXT, kind="Chemical", ident="D1", doc_id="100"):
    ann = {"id": "T1", "infons": {"type": kind, "identifier": ident}, "text": "Aspirin",
           "locations": [{"offset": 0, "length": 7}]}
    passage = {"offset": 0, "infons": {"type": "title"}, "text": text, "sentences": [], "relations": [], "annotations": [ann]}
    return {"id": doc_id, "infons": {}, "relations": [], "annotations": [], "passages": [passage]}


@pytest.mark.parametrize("doc,where", [
    (_bioc(), "document '100', passage at offset 0: text holds a lone surrogate (U+D800) at character 8"),
    (_bioc("Aspirin x", kind="Chem\udc00"), "annotation 'T1': its `type` infon holds a lone surrogate (U+DC00)"),
    (_bioc("Aspirin x", ident="D\ud801"), "annotation 'T1': its id holds a lone surrogate (U+D801)"),
    (_bioc("Aspirin x", doc_id="1\ud800"), "its id holds a lone surrogate (U+D800) at character 1"),
])
def test_bioc_json_refuses_a_lone_surrogate_naming_the_document(tmp_path, doc, where):
    path = tmp_path / "c.json"
    good = _bioc("Aspirin x", doc_id="200")
    path.write_text(json.dumps({"source": "", "date": "", "key": "", "infons": {}, "documents": [doc, good]}))
    with pytest.raises(BioCFormatError) as err:
        read_bioc(path)
    assert where in str(err.value) and str(err.value).startswith(f"{path}: ")
    bad = BadLines()
    assert [d.pmid for d in read_bioc(path, bad_lines=bad)] == (["100", "200"] if "annotation" in where else ["200"])
    assert bad.count == 1


@pytest.mark.parametrize("record,reason", [
    ({"text": SURROGATE_TEXT, "spans": [{"start": 0, "end": 7, "kb_id": "D1", "label": "Chemical"}]}, '"text" holds'),
    ({"text": "Aspirin", "spans": [{"start": 0, "end": 7, "kb_id": "D\ud800", "label": "Chemical"}]}, "holds a lone"),
    ({"text": "Aspirin", "spans": [{"start": 0, "end": 7, "kb_id": "D1", "label": "Chem\ud800"}]}, "the label of span 0-7"),
    ({"text": "Aspirin", "meta": {"doc_id": "d\ud800"}, "spans": [{"start": 0, "end": 7, "kb_id": "D1"}]}, "meta.doc_id"),
    ({"id": "1", "text": SURROGATE_TEXT, "mentions": [{"start_char": 0, "end_char": 7, "label": "Chemical", "kb_id": "D1"}]},
     '"text" holds a lone surrogate (U+D800) at character 8'),
    ({"id": "1\ud800", "text": "Aspirin", "mentions": []}, '"id" holds'),
])
def test_prodigy_and_linked_jsonl_refuse_a_lone_surrogate_naming_the_line(tmp_path, record, reason):
    path = tmp_path / "tasks.jsonl"
    good = {"text": "warfarin", "spans": [{"start": 0, "end": 8, "kb_id": "D5", "label": "Chemical"}]}
    path.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(CorpusFormatError, match=r"tasks\.jsonl:2: ") as err:
        read_prodigy(path)
    assert reason in str(err.value) and "lone surrogate" in str(err.value)
    bad = BadLines()
    assert [d.text for d in read_prodigy(path, bad)] == ["warfarin"] and bad.count == 1


def test_convert_refuses_a_lone_surrogate_in_one_error_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"text": SURROGATE_TEXT, "spans": [{"start": 0, "end": 7, "kb_id": "D1"}]}) + "\n")
    result = CliRunner().invoke(app, ["convert", str(path), str(tmp_path / "out.spacy")])
    assert result.exit_code == 2 and not isinstance(result.exception, UnicodeEncodeError)
    assert f"error: {path}:1: \"text\" holds a lone surrogate (U+D800) at character 8" in result.output


# ---------------------------------------------------------------- bug05: an id map with CR line ends
def test_id_map_with_cr_line_ends_is_refused_not_merged(tmp_path):
    path = tmp_path / "map.tsv"
    path.write_bytes(b"D1\tD9\rD2\tD8\r")
    with pytest.raises(IdMapError, match=r"map\.tsv:1: id 'D9\\rD2' holds '\\r' .*save the file with LF or CRLF"):
        read_id_map(path)
    path.write_bytes(b"old_id\tnew_id\rD1\tD9\rD2\tD8\r")  # a header: refused the same way, with the same hint
    with pytest.raises(IdMapError, match=r"map\.tsv:1: .*CR line ends\? save the file with LF or CRLF"):
        read_id_map(path)
    path.write_bytes(b"old_id\tnew_id\r\nD1\tD\x0b9\r\n")
    with pytest.raises(IdMapError, match=r"map\.tsv:2: id 'D\\x0b9' holds '\\x0b' \(U\+000B\)"):
        read_id_map(path)
    path.write_bytes(b"old_id\tnew_id\r\nD1\tD9\r\nD2\tD8\n")
    assert read_id_map(path) == {"D1": "D9", "D2": "D8"}


# ---------------------------------------------------------------- bug06: a label-types map that is not UTF-8
def test_label_types_map_not_utf8_or_not_json_names_the_line(tmp_path):
    path = tmp_path / "map.json"
    path.write_bytes('{\n  "Disease": ["Disease"],\n  "Caf\xe9": ["Chemical"]\n}\n'.encode("latin-1"))
    with pytest.raises(InputError, match=r"map\.json:3: not UTF-8 text \(byte 0xe9 at column 7\)"):
        read_label_types(path)
    path.write_bytes('{"Disease": ["Disease"]}\n'.encode("utf-16"))
    with pytest.raises(InputError, match=r"map\.json:1: not UTF-8 text \(byte 0xff at column 1\)"):
        read_label_types(path)
    path.write_text('{\n  "Disease": ["Disease"],\n}\n')
    with pytest.raises(InputError, match=r"map\.json:3: not a readable JSON label → KB types map"):
        read_label_types(path)
    path.write_bytes('\ufeff{"Café": ["Chemical"]}'.encode("utf8"))
    assert read_label_types(path) == {"Café": ["Chemical"]}


# ---------------------------------------------------------------- bug07: a lone CR in csv / tsv KBs
@pytest.mark.parametrize("name,fmt,data,line", [
    ("kb.tsv", "tsv", b"id\tname\nX1\tfoo\rbar\nX2\tbaz\n", 2),
    ("kb.csv", "csv", b"id,name\nX1,foo\rbar\nX2,baz\n", 2),
    ("mac.csv", "csv", b"X1,foo\rX2,baz\r", 1),
])
def test_csv_tsv_lone_cr_is_refused_in_words_about_the_file(tmp_path, name, fmt, data, line):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(KBFormatError) as err:
        read_kb(path, fmt)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: a lone carriage return (\\r) inside")
    assert "save the file with LF or CRLF line ends" in message and "universal-newline" not in message
    path.write_bytes(b'id,name\nX1,"foo\rbar"\n')  # quoted: CSV holds it
    assert [e.name for e in read_kb(path, "csv")] == ["foo\rbar"]


# ---------------------------------------------------------------- bug08: char_ngrams composes (NFC) as normalize does
def test_char_ngrams_score_a_decomposed_spelling_as_the_composed_one():
    name = "Ménière disease"
    assert ngram_cosine(unicodedata.normalize("NFD", name), name) == pytest.approx(1.0)
    assert ngram_cosine(unicodedata.normalize("NFD", name).upper(), unicodedata.normalize("NFC", name)) == pytest.approx(1.0)
