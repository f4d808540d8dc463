"""Composite ids joined by ``+`` (NCBI) or ``,`` (BioRED) are split in every format, as in PubTator: in a Prodigy
task, in a ``.spacy`` input, and by :func:`~spacy_pel.corpora.gold_ids` (no KB id holds a separator)."""
import json

import spacy
from spacy.tokens import DocBin, Span

from spacy_pel.corpora import NIL, convert, gold_ids, gold_spans, read_docbin
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.kb.entity import ID_SEPARATORS, id_problem

from .conftest import shared

NLP = spacy.blank("en")


def test_prodigy_composite_ids_joined_by_plus_or_comma_are_split(tmp_path):
    text = "Lithium carbonate and aspirin with warfarin"
    tasks = [{"text": text, "spans": [{"start": 0, "end": 17, "label": "Chemical", "kb_id": "D1+D4"},
                                      {"start": 22, "end": 29, "label": "Chemical", "kb_id": "D4, D5"},
                                      {"start": 35, "end": 43, "label": "Chemical", "kb_id": "-1"}]},
             {"text": "Atrial flutter", "spans": [{"start": 0, "end": 14, "label": "Disease"}],
              "accept": ["D2+D3"], "options": [{"id": "D2+D3"}]}]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(t) for t in tasks) + "\n", encoding="utf8")
    stats = convert_corpora([tmp_path / "t.jsonl"], tmp_path / "t.spacy")
    docs = read_docbin(NLP, tmp_path / "t.spacy")
    assert [(s.text, s.kb_id_) for d in docs for s in gold_spans(d)] == [
        ("Lithium carbonate", "D1|D4"), ("aspirin", "D4|D5"), ("warfarin", NIL), ("Atrial flutter", "D2|D3")]
    assert (stats["composite"], stats["nil"]) == (3, 1)


def test_spacy_input_composite_ids_are_split_and_an_empty_id_kept(tmp_path):
    doc = NLP("aspirin and warfarin and fever and gout")
    doc.ents = [Span(doc, 0, 1, "Chemical", kb_id="D1+D4"), Span(doc, 2, 3, "Chemical", kb_id="D4, D5"),
                Span(doc, 4, 5, "Disease", kb_id="-"), Span(doc, 6, 7, "Disease")]
    db = DocBin(store_user_data=True)
    db.add(doc)
    db.to_disk(tmp_path / "in.spacy")
    stats = convert_corpora([tmp_path / "in.spacy"], tmp_path / "out.spacy")
    (out,) = read_docbin(NLP, tmp_path / "out.spacy")
    assert [(s.text, s.kb_id_) for s in gold_spans(out)] == [("aspirin", "D1|D4"), ("warfarin", "D4|D5"),
                                                            ("fever", NIL), ("gout", "")]
    assert [e.kb_id_ for e in out.ents] == ["D1|D4", "D4|D5", NIL, ""]
    assert (stats["composite"], stats["nil"]) == (2, 1)


def test_gold_ids_split_on_every_separator_no_kb_id_may_hold():
    assert gold_ids("D1|D2") == gold_ids("D1+D2") == gold_ids("D1,D2") == gold_ids("D1 , D2") == ["D1", "D2"]
    assert gold_ids("D1") == ["D1"] and gold_ids("") == [] and gold_ids(NIL) == [NIL]
    assert all(id_problem(f"A{sep}B") for sep in ID_SEPARATORS)  # so no KB id is cut in two


def test_converted_ncbi_and_bc5cdr_gold_ids_are_as_before(tmp_path):
    """The corpora PubTator conversion writes hold ids joined by ``|`` only: gold_ids splits them as it did."""
    for i, source in enumerate([shared("ncbi-disease", "NCBIdevelopset_corpus.txt"),
                                shared("bc5cdr", "CDR_DevelopmentSet.PubTator.txt")]):
        convert(source, tmp_path / f"{i}.spacy")
        ids = [s.kb_id_ for d in read_docbin(NLP, tmp_path / f"{i}.spacy") for s in gold_spans(d)]
        assert ids and all(gold_ids(k) == [x for x in k.split("|") if x] for k in ids)
