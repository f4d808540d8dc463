"""Session 73, bug03: ``link``'s ``.jsonl`` output marks each NIL mention ``"nil": true`` (its ``kb_id`` stays the
linker's NIL label, "CUI-less" here), and ``convert`` reads it back as NIL, as it does the ``.pubtator`` output
(it read a mention of an entity called "CUI-less")."""
import json

import pytest
import spacy

from spacy_pel.bulk.linked_formats import LinkedDoc, write_linked
from spacy_pel.bulk.local import link_file
from spacy_pel.corpora import NIL, CorpusFormatError, gold_spans, read_docbin
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.prodigy_corpus import read_prodigy

TEXT = "Warfarin and aspirin with atrial flutter."


def row(a, b, kb_id, label="Chemical"):
    return {"doc_id": "1", "start_char": a, "end_char": b, "text": TEXT[a:b], "label": label, "kb_id": kb_id,
            "score": 0.5, "confidence": 0.5, "candidates": [{"id": "D5", "name": "warfarin", "score": 0.5}]}


def test_jsonl_output_marks_nil_mentions_and_convert_reads_them_as_nil(tmp_path):
    rows = [row(0, 8, "D5"), row(13, 20, "CUI-less"), row(26, 40, NIL, "Disease")]
    write_linked([LinkedDoc("1", TEXT, None, rows)], tmp_path / "out.jsonl", "jsonl", frozenset({"CUI-less"}))
    (record,) = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf8").splitlines()]
    assert [(m["kb_id"], m["nil"]) for m in record["mentions"]] == [("D5", False), ("CUI-less", True), ("NIL", True)]
    assert list(record["mentions"][0])[:7] == ["start_char", "end_char", "text", "label", "kb_id", "nil", "score"]
    (doc,) = read_prodigy(tmp_path / "out.jsonl")
    assert [a.ids for a in doc.annotations] == [["D5"], [NIL], [NIL]]
    # a file written before the flag: its mentions as they are (an id starting with NIL is NIL)
    record["mentions"] = [{k: v for k, v in m.items() if k != "nil"} for m in record["mentions"]]
    (tmp_path / "old.jsonl").write_text(json.dumps(record) + "\n", encoding="utf8")
    assert [a.ids for a in read_prodigy(tmp_path / "old.jsonl")[0].annotations] == [["D5"], ["CUI-less"], [NIL]]
    record["mentions"][0]["nil"] = "yes"
    (tmp_path / "bad.jsonl").write_text(json.dumps(record) + "\n", encoding="utf8")
    with pytest.raises(CorpusFormatError, match='"nil" must be true or false'):
        read_prodigy(tmp_path / "bad.jsonl")


def test_link_then_convert_keeps_a_custom_nil_label_nil_in_jsonl_as_in_pubtator(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "nil_label": "CUI-less", "threshold": 0.99})  # every mention NIL
    nlp.to_disk(tmp_path / "pipe")
    (tmp_path / "in.pubtator").write_text("1|t|Warfarin and aspirin\n1|a|with atrial flutter.\n"
                                          "1\t0\t8\tWarfarin\tChemical\tD5\n1\t26\t40\tatrial flutter\tDisease\tD3\n\n")
    for out in ("out.jsonl", "out.pubtator"):
        link_file(tmp_path / "in.pubtator", tmp_path / out, tmp_path / "pipe", progress=False)
        stats = convert_corpora([tmp_path / out], tmp_path / f"{out}.spacy")
        docs = read_docbin(spacy.blank("en"), tmp_path / f"{out}.spacy")
        assert (stats["nil"], [s.kb_id_ for d in docs for s in gold_spans(d)]) == (2, [NIL, NIL]), out
