"""``python -m spacy_pel link``: one corpus file linked in this process and written as JSON lines, PubTator or
BioC (spacy_pel.bulk.local, spacy_pel.bulk.linked_formats), with the tiny BERT and an entity ruler as NER.

What must hold: the ids written are those ``nlp.pipe`` gives the same documents (whatever the batch size);
PubTator and BioC output read back by ``convert``'s readers give the same mentions with the linked ids
(NIL as -1); raw text needs a pipeline that finds mentions; a malformed document names its line."""
import json
import re
import tempfile
from pathlib import Path

import bioc
import pytest
import spacy
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from spacy.language import Language
from typer.testing import CliRunner

from spacy_pel.bioc_corpus import read_bioc
from spacy_pel.bulk.linked_formats import LinkedDoc, pubtator_lines, write_linked
from spacy_pel.bulk.local import link_file
from spacy_pel.bulk.worker import LinkWorker
from spacy_pel.cli.link import app
from spacy_pel.corpora import NIL, gold_spans, pubtator_to_docs, read_docbin, read_pubtator
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.files import InputError
from spacy_pel.pipeline.linker import configure_linker
from spacy_pel.prodigy_corpus import read_prodigy

from .conftest import shared

set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "spacy_pel_hypothesis")  # its caches out of the checkout
PUBTATOR = """\
11|t|Lithium carbonate and atrial flutter.
11|a|A newborn on warfarin had tricuspid regurgitation; aspirin was stopped.
11\t0\t17\tLithium carbonate\tChemical\tD1
11\t22\t36\tatrial flutter\tDisease\tD3
11\t51\t59\twarfarin\tChemical\tD5
11\t64\t87\ttricuspid regurgitation\tDisease\t-1
11\t89\t96\taspirin\tChemical\tD4

12|t|Flutter after aspirin.
12|a|No lithium carbonate was given.
12\t0\t7\tFlutter\tDisease\tD3
12\t14\t21\taspirin\tChemical\tD4
12\t26\t43\tlithium carbonate\tChemical\tD1
"""
RAW = [{"id": "a1", "text": "Warfarin and aspirin\nwith atrial flutter."}, {"id": "a2", "text": "No mention here."},
       {"id": "a3", "text": "Lithium carbonate: tricuspid regurgitation."}]
PATTERNS = [{"label": "Chemical", "pattern": [{"LOWER": w} for w in term.split()]} for term in
            ("lithium carbonate", "warfarin", "aspirin")] + \
           [{"label": "Disease", "pattern": [{"LOWER": w} for w in term.split()]} for term in
            ("atrial flutter", "tricuspid regurgitation")]


def save_pipeline(kb_dir: Path, path: Path, ner: bool) -> Path:
    """pel_linker over the tiny KB (with an entity ruler before it when ``ner``), a NIL threshold at the
    median top score, so that some mentions are NIL and some are not."""
    nlp = spacy.blank("en")
    if ner:
        nlp.add_pipe("entity_ruler").add_patterns(PATTERNS)
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3})
    docs = list(pubtator_to_docs(nlp, write(path.parent / "scores.txt", PUBTATOR)))
    scores = sorted(e._.pel_candidates[0][2] for d in nlp.pipe(docs) for e in d.ents)
    configure_linker(nlp, threshold=scores[len(scores) // 2])
    nlp.to_disk(path)
    return path


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf8")
    return path


@pytest.fixture
def pipelines(kb_dir, tmp_path):
    return save_pipeline(kb_dir, tmp_path / "with_ner", True), save_pipeline(kb_dir, tmp_path / "linker_only", False)


def expected_ids(pipeline: Path, corpus: Path):
    """The kb_ids ``nlp.pipe`` gives the corpus's gold mentions (the path ``evaluate`` takes)."""
    nlp = spacy.load(pipeline)
    docs = list(pubtator_to_docs(nlp, corpus))
    return [[e.kb_id_ for e in d.ents] for d in nlp.pipe(docs, disable=[n for n in nlp.pipe_names if n != "pel_linker"])]


def test_pubtator_in_pubtator_out_has_the_mentions_and_the_ids_nlp_pipe_gives(pipelines, tmp_path):
    corpus = write(tmp_path / "in.txt", PUBTATOR)
    stats = link_file(corpus, tmp_path / "out.pubtator", pipelines[0], batch_size=1, progress=False)
    assert (stats["docs"], stats["mentions"], stats["format"], stats["output_format"]) == (2, 8, "pubtator", "pubtator")
    gold, out = read_pubtator(corpus), read_pubtator(tmp_path / "out.pubtator")
    assert [(d.pmid, d.text, d.title_length) for d in out] == [(d.pmid, d.text, d.title_length) for d in gold]
    assert [[(a.start, a.end, a.text, a.type) for a in d.annotations] for d in out] == \
        [[(a.start, a.end, a.text, a.type) for a in d.annotations] for d in gold]  # the given mentions, not the ruler's
    expected = expected_ids(pipelines[0], corpus)
    written = [[a.ids[0] for a in d.annotations] for d in out]
    assert written == [["NIL" if i == NIL else i for i in doc] for doc in expected]
    assert 0 < stats["nil"] < 8 and stats["nil"] == sum(i == NIL for doc in written for i in doc)
    lines = (tmp_path / "out.pubtator").read_text(encoding="utf8").splitlines()
    assert sum(line.endswith("\t-1") for line in lines) == stats["nil"]  # NIL as BC5CDR writes it
    link_file(corpus, tmp_path / "again.pubtator", pipelines[0], batch_size=1000, progress=False)
    assert (tmp_path / "again.pubtator").read_text() == (tmp_path / "out.pubtator").read_text()


@pytest.mark.parametrize("suffix, format", [(".xml", "bioc-xml"), (".json", "bioc-json")])
def test_bioc_output_reads_back_as_convert_reads_bioc(pipelines, tmp_path, suffix, format):
    corpus = write(tmp_path / "in.txt", PUBTATOR)
    link_file(corpus, tmp_path / f"out{suffix}", pipelines[1], progress=False)
    back = read_bioc(tmp_path / f"out{suffix}", format)
    assert [d.text for d in back] == [d.text for d in read_pubtator(corpus)]
    assert [[a.ids for a in d.annotations] for d in back] == [[[i] for i in doc] for doc in expected_ids(pipelines[1], corpus)]
    with open(tmp_path / f"out{suffix}", encoding="utf8") as fp:
        collection = (bioc.biocxml if format == "bioc-xml" else bioc.biocjson).load(fp)
    infons = [a.infons for p in collection.documents[0].passages for a in p.annotations]
    assert [p.infons["type"] for p in collection.documents[0].passages] == ["title", "abstract"]
    assert all(0 <= float(i["confidence"]) <= 1 and "score" in i for i in infons)
    assert all(("name" in i) == (i["identifier"] != "-1") for i in infons)


def test_prodigy_review_tasks_read_back_as_the_links(pipelines, tmp_path):
    """``--output-format prodigy``: one choice task per mention, the linker's choice accepted, its candidates and
    NIL as options; ``convert`` of the tasks as written gives the documents with the linked ids."""
    corpus = write(tmp_path / "in.txt", PUBTATOR)
    link_file(corpus, tmp_path / "review.jsonl", pipelines[1], output_format_name="prodigy", progress=False)
    tasks = [json.loads(line) for line in (tmp_path / "review.jsonl").read_text(encoding="utf8").splitlines()]
    expected = [i for doc in expected_ids(pipelines[1], corpus) for i in doc]
    assert len(tasks) == 8 and [t["accept"] for t in tasks] == [["NIL_otherLink" if i == NIL else i] for i in expected]
    assert all(t["options"][-1]["id"] == "NIL_otherLink" and len(t["options"]) == 4 for t in tasks)  # top_k 3 + NIL
    back = read_prodigy(tmp_path / "review.jsonl")
    gold = read_pubtator(corpus)
    assert [(d.pmid, d.text) for d in back] == [(d.pmid, d.text) for d in gold]
    assert [[(a.start, a.end, a.type) for a in d.annotations] for d in back] == [[(a.start, a.end, a.type) for a in d.annotations] for d in gold]
    assert [a.ids[0] for d in back for a in d.annotations] == expected


@pytest.mark.parametrize("suffix, written", [(".jsonl", '"id": "12"'), (".pubtator", "12|t|Flutter after aspirin.")])
def test_a_spacy_corpus_links_as_its_pubtator_source(pipelines, tmp_path, suffix, written):
    """PubTator output of a .spacy corpus keeps its titles: convert keeps where each abstract begins (session 73)."""
    corpus = write(tmp_path / "in.txt", PUBTATOR)
    convert_corpora([corpus], tmp_path / "in.spacy")
    link_file(corpus, tmp_path / f"a{suffix}", pipelines[1], progress=False)
    link_file(tmp_path / "in.spacy", tmp_path / f"b{suffix}", pipelines[1], progress=False)
    a, b = ((tmp_path / f"{n}{suffix}").read_text(encoding="utf8") for n in "ab")
    assert a == b and written in b


def test_a_file_without_documents_is_refused_in_one_line_whatever_its_format(pipelines, tmp_path):
    from spacy.tokens import DocBin

    DocBin().to_disk(tmp_path / "empty.spacy")
    with pytest.raises(InputError, match="no document to link"):
        link_file(tmp_path / "empty.spacy", tmp_path / "out.jsonl", pipelines[1], progress=False)
    result = CliRunner().invoke(app, [str(tmp_path / "empty.spacy"), str(tmp_path / "out.jsonl"), "--pipeline",
                                      str(pipelines[1])])
    assert result.exit_code != 0 and "no document to link" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out.jsonl").exists()


def test_raw_jsonl_in_jsonl_out_with_the_pipelines_ner(pipelines, tmp_path):
    corpus = write(tmp_path / "in.jsonl", "".join(json.dumps(r) + "\n" for r in RAW))
    stats = link_file(corpus, tmp_path / "out.jsonl", pipelines[0], progress=False)
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf8").splitlines()]
    nlp = spacy.load(pipelines[0])
    direct = [[(e.start_char, e.end_char, e.label_, e.kb_id_) for e in d.ents] for d in nlp.pipe(r["text"] for r in RAW)]
    assert [r["id"] for r in records] == ["a1", "a2", "a3"] and [r["text"] for r in records] == [r["text"] for r in RAW]
    assert [[(m["start_char"], m["end_char"], m["label"], m["kb_id"]) for m in r["mentions"]] for r in records] == direct
    assert [len(d) for d in direct] == [3, 0, 2] and stats["mentions"] == 5
    assert all(len(m["candidates"]) == 3 and m["candidates"][0]["score"] == m["score"] for r in records for m in r["mentions"])
    # the same raw text as PubTator: written whole as the title (line breaks as spaces), offsets unchanged
    link_file(corpus, tmp_path / "out.pubtator", pipelines[0], progress=False)
    back = read_pubtator(tmp_path / "out.pubtator")
    assert [d.text[: len(r["text"])] for d, r in zip(back, RAW)] == [r["text"].replace("\n", " ") for r in RAW]
    assert [[(a.start, a.end, a.type) for a in d.annotations] for d in back] == [[m[:3] for m in doc] for doc in direct]


def test_pubtator_without_any_mention_is_raw_text_for_the_pipelines_ner(pipelines, tmp_path):
    """Abstracts as PubMed exports them (PubTator with no annotation lines): the NER finds the mentions."""
    titles = "\n".join(line for line in PUBTATOR.splitlines() if "|t|" in line or "|a|" in line or not line)
    corpus = write(tmp_path / "abstracts.txt", titles + "\n")
    assert not any(d.annotations for d in read_pubtator(corpus))
    link_file(corpus, tmp_path / "out.pubtator", pipelines[0], progress=False)
    nlp = spacy.load(pipelines[0])
    direct = [[(e.start_char, e.end_char, e.label_) for e in nlp(d.text).ents] for d in read_pubtator(corpus)]
    out = read_pubtator(tmp_path / "out.pubtator")
    assert [[(a.start, a.end, a.type) for a in d.annotations] for d in out] == direct and sum(map(len, direct)) == 7
    with pytest.raises(InputError, match="abstracts.txt is raw text .* cannot find mentions in it"):
        link_file(corpus, tmp_path / "none.pubtator", pipelines[1], progress=False)


def test_raw_text_needs_a_pipeline_that_finds_mentions(pipelines, tmp_path):
    corpus = write(tmp_path / "in.jsonl", json.dumps(RAW[0]) + "\n")
    with pytest.raises(InputError, match="is raw text .* cannot find mentions in it"):
        link_file(corpus, tmp_path / "out.jsonl", pipelines[1], progress=False)
    assert not (tmp_path / "out.jsonl").exists()


def test_a_malformed_document_names_its_line_or_is_skipped_and_counted(pipelines, tmp_path):
    corpus = write(tmp_path / "in.jsonl", json.dumps(RAW[0]) + "\n{not json\n" + json.dumps({"text": "no id"}) + "\n"
                   + json.dumps(RAW[2]) + "\n")
    with pytest.raises(InputError, match=rf"^{corpus}:2: not a JSON line"):
        link_file(corpus, tmp_path / "out.jsonl", pipelines[0], progress=False)
    stats = link_file(corpus, tmp_path / "out.jsonl", pipelines[0], skip_bad_lines=True, progress=False)
    assert stats["docs"] == 2 and stats["skipped_lines"] == 2
    assert stats["skipped_examples"][0].startswith(f"{corpus}:2:") and stats["skipped_examples"][1].startswith(f"{corpus}:3:")
    bad = write(tmp_path / "bad.txt", PUBTATOR.replace("11\t22\t36\tatrial flutter", "11\t22\t37\tatrial flutter"))
    with pytest.raises(InputError, match=rf"^{bad}:4: "):
        link_file(bad, tmp_path / "out.pubtator", pipelines[0], progress=False)


def test_pubtator_refuses_an_id_it_cannot_hold_before_linking(pipelines, tmp_path, monkeypatch):
    with pytest.raises(InputError, match="cannot be a PubTator id"):
        pubtator_lines(LinkedDoc("a|b", "text"), NIL)
    corpus = write(tmp_path / "in.jsonl", json.dumps({"id": "a|b", "text": "Aspirin."}) + "\n")
    monkeypatch.setattr(LinkWorker, "link", lambda *_: pytest.fail("linked before the id was checked"))
    with pytest.raises(InputError, match="'a|b' cannot be a PubTator id"):
        link_file(corpus, tmp_path / "out.pubtator", pipelines[0], progress=False)


def test_cli_links_and_prints_its_counts_and_refuses_an_unknown_output_suffix(pipelines, tmp_path):
    corpus = write(tmp_path / "in.txt", PUBTATOR)
    result = CliRunner().invoke(app, [str(corpus), str(tmp_path / "out.jsonl"), "--pipeline", str(pipelines[0]),
                                      "--no-progress"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["mentions"] == 8
    result = CliRunner().invoke(app, [str(corpus), str(tmp_path / "out.csv"), "--pipeline", str(pipelines[0])])
    assert result.exit_code == 2 and "give --output-format" in result.stderr and "Traceback" not in result.output


@settings(max_examples=60, deadline=None, database=None)
@given(data=st.data())
def test_pubtator_output_reads_back_with_its_texts_and_offsets(data):
    """Any text (line breaks, tabs, pipes, non-ASCII) and any mentions in it: the PubTator written reads back
    with the same text (line breaks and tabs as spaces) and the same offsets, types and ids."""
    alphabet = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
    title = data.draw(st.text(alphabet, min_size=1, max_size=30))
    abstract = data.draw(st.text(alphabet, max_size=60))
    known = data.draw(st.booleans())
    text = title + " " + abstract if known else title + abstract
    rows = []
    for _ in range(data.draw(st.integers(0, 4))):
        a = data.draw(st.integers(0, len(text) - 1))
        b = data.draw(st.integers(a + 1, len(text)))
        mention = text[a:b]
        if not mention.strip() or mention != mention.strip():
            continue  # a mention is a stripped, non-blank piece of the text
        rows.append({"start_char": a, "end_char": b, "text": mention, "label": "Disease",
                     "kb_id": data.draw(st.sampled_from(["D1", "NIL", "OMIM:1"]))})
    doc = LinkedDoc("d1", text, len(title) if known else None, rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "out.pubtator"
        path.write_text("\n".join(pubtator_lines(doc, NIL)) + "\n\n", encoding="utf8")
        (back,) = read_pubtator(path)
    flat = text.replace("\r", " ").replace("\n", " ").replace("\t", " ")
    assert back.text[: len(flat)] == flat
    assert [(a.start, a.end, a.ids) for a in back.annotations] == [(r["start_char"], r["end_char"], [r["kb_id"]]) for r in rows]


def test_bioc_xml_writes_control_characters_as_spaces_and_keeps_the_offsets(tmp_path):
    """XML cannot hold most control characters (a text from JSON lines may): they become spaces in the XML
    only, so the document is written and its offsets stay right; BioC JSON keeps the text as it is."""
    text = "a \x0b aspirin\x01 case"
    row = {"start_char": 4, "end_char": 11, "text": "aspirin", "label": "Chemical", "kb_id": "D4", "score": 0.9,
           "confidence": 0.8, "candidates": [{"id": "D4", "name": "aspirin\x02", "score": 0.9}]}
    write_linked([LinkedDoc("x1", text, None, [row])], tmp_path / "out.xml", "bioc-xml")
    (back,) = read_bioc(tmp_path / "out.xml", "bioc-xml")
    assert back.text == "a   aspirin  case" and [(a.start, a.end, a.text, a.ids) for a in back.annotations] == [(4, 11, "aspirin", ["D4"])]
    write_linked([LinkedDoc("x1", text, None, [row])], tmp_path / "out.json", "bioc-json")
    assert read_bioc(tmp_path / "out.json", "bioc-json")[0].text == text


OVERLAP = """\
61|t|Lithium carbonate and atrial flutter.
61|a|Aspirin.
61\t0\t17\tLithium carbonate\tChemical\tD1
61\t0\t7\tLithium\tChemical\tD1
61\t22\t36\tatrial flutter\tDisease\tD3
61\t22\t36\tatrial flutter\tDisease\tD3
61\t38\t45\tAspirin\tChemical\tD4
"""


@Language.component("test_reads_entities", assigns=["doc.ents"])
def reads_entities(doc):
    return doc


def linked_mentions(path: Path):
    return [(a.start, a.end, a.type, a.ids) for d in read_pubtator(path) for a in d.annotations]


def test_overlapping_and_repeated_mentions_are_all_linked_each_as_alone(pipelines, tmp_path, kb_dir):
    """Nested mentions and a mention given twice (doc.ents cannot hold them): every one is linked, to the id it
    gets in a file where nothing overlaps it; a pipeline with a component after the linker that reads the
    entities links doc.ents only, and counts the mentions left out."""
    corpus = write(tmp_path / "in.txt", OVERLAP)
    stats = link_file(corpus, tmp_path / "out.pubtator", pipelines[0], progress=False)
    assert (stats["mentions"], stats["unaligned"], stats["overlapping_not_linked"]) == (5, 0, 0)
    lines, alone = OVERLAP.splitlines(), []
    for keep in ((2, 4, 6), (3, 5)):
        part = write(tmp_path / "part.txt", "\n".join(lines[:2] + [lines[i] for i in keep]) + "\n")
        link_file(part, tmp_path / "part.pubtator", pipelines[0], progress=False)
        alone += linked_mentions(tmp_path / "part.pubtator")
    assert linked_mentions(tmp_path / "out.pubtator") == sorted(alone, key=lambda m: m[:2])
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3})
    nlp.add_pipe("test_reads_entities")
    nlp.to_disk(tmp_path / "reads")
    result = CliRunner().invoke(app, [str(corpus), str(tmp_path / "r.pubtator"), "--pipeline", str(tmp_path / "reads"),
                                      "--no-progress"])
    assert result.exit_code == 0 and json.loads(result.stdout)["mentions"] == 3, result.output
    assert json.loads(result.stdout)["overlapping_not_linked"] == 2 and "2 given mention(s) not linked" in result.stderr


def test_a_given_mention_that_cannot_be_a_span_is_counted_and_named(pipelines, tmp_path):
    corpus = write(tmp_path / "in.txt", "71|t|Lithium carbonate  and flutter.\n71|a|Aspirin.\n"
                   "71\t0\t18\tLithium carbonate \tChemical\tD1\n71\t32\t39\tAspirin\tChemical\tD4\n")
    result = CliRunner().invoke(app, [str(corpus), str(tmp_path / "out.pubtator"), "--pipeline", str(pipelines[1]),
                                      "--no-progress"])
    stats = json.loads(result.stdout)
    assert result.exit_code == 0 and (stats["mentions"], stats["unaligned"]) == (1, 1), result.output
    assert stats["unaligned_examples"][0].startswith("71 0-18 'Lithium carbonate '")
    assert "1 given mention(s) not linked" in result.stderr and "71 0-18" in result.stderr


def test_prodigy_tasks_are_linked_with_format_prodigy(pipelines, tmp_path):
    lines = shared("nel-emerson", "emerson_annotated_text.jsonl").read_text(encoding="utf8").splitlines()
    rejected = dict(json.loads(lines[0]), answer="reject", _input_hash=1)
    corpus = write(tmp_path / "tasks.jsonl", "\n".join([*lines, json.dumps(rejected)]) + "\n")
    stats = link_file(corpus, tmp_path / "out.pubtator", pipelines[1], format="prodigy", progress=False)
    assert (stats["docs"], stats["mentions"], stats["format"], stats["left_out_by_answer"]) == (30, 30, "prodigy", {"reject": 1})
    spans = [json.loads(line)["spans"][0] for line in lines]
    assert [(a.start, a.end) for d in read_pubtator(tmp_path / "out.pubtator") for a in d.annotations] == \
        [(s["start"], s["end"]) for s in spans]


@pytest.mark.parametrize("output", ["out.pubtator", "out.xml", "out.json", "review.prodigy"])
def test_an_id_given_twice_is_refused_before_linking_for_one_document_per_id(pipelines, tmp_path, monkeypatch, output):
    corpus = write(tmp_path / "in.jsonl", '{"id": "a", "text": "Aspirin."}\n\n{"id": "b", "text": ""}\n'
                   '{"id": "a", "text": "Warfarin."}\n')
    monkeypatch.setattr(LinkWorker, "link", lambda *_: pytest.fail("linked before the ids were checked"))
    name = "prodigy" if output.endswith(".prodigy") else None
    with pytest.raises(InputError, match=rf"^{re.escape(str(corpus))}:4: document id 'a' appears twice \(first at "
                                         rf"{re.escape(str(corpus))}:1\)"):
        link_file(corpus, tmp_path / output, pipelines[0], output_format_name=name, progress=False)
    result = CliRunner().invoke(app, [str(corpus), str(tmp_path / "cli.pubtator"), "--pipeline", str(pipelines[0])])
    assert result.exit_code != 0 and len(result.stderr.strip().splitlines()) == 1 and "appears twice" in result.stderr
    monkeypatch.undo()
    assert link_file(corpus, tmp_path / "out.jsonl", pipelines[0], progress=False)["docs"] == 3  # one record a line


def test_documents_of_the_same_text_stay_apart_in_prodigy_tasks(pipelines, tmp_path):
    corpus = write(tmp_path / "in.txt", "31|t|Aspirin.\n31|a|Warfarin.\n31\t0\t7\tAspirin\tChemical\tD4\n\n"
                   "32|t|Aspirin.\n32|a|Warfarin.\n32\t9\t17\tWarfarin\tChemical\tD5\n")
    review = tmp_path / "review.jsonl"
    link_file(corpus, review, pipelines[1], output_format_name="prodigy", progress=False)
    expected = [("31", [(0, 7)]), ("32", [(9, 17)])]
    assert [(d.pmid, [(a.start, a.end) for a in d.annotations]) for d in read_prodigy(review)] == expected
    assert convert_corpora([review], tmp_path / "r.spacy")["docs"] == 2
    tasks = [json.loads(line) for line in review.read_text(encoding="utf8").splitlines()]
    assert tasks[0]["_input_hash"] != tasks[1]["_input_hash"]
    reviewed = [dict(t, _input_hash=7, answer="accept") for t in tasks]  # Prodigy's own hash: of the text, one for both
    write(review, "".join(json.dumps(t) + "\n" for t in reviewed))
    assert [(d.pmid, [(a.start, a.end) for a in d.annotations]) for d in read_prodigy(review)] == expected


def test_convert_reads_links_jsonl_output_back(pipelines, tmp_path):
    corpus = write(tmp_path / "in.jsonl", "".join(json.dumps(r) + "\n" for r in RAW))
    stats = link_file(corpus, tmp_path / "out.jsonl", pipelines[0], progress=False)
    back = convert_corpora([tmp_path / "out.jsonl"], tmp_path / "back.spacy")
    assert (back["docs"], back["mentions"], back["nil"]) == (3, stats["mentions"], stats["nil"]) and stats["mentions"] == 5
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf8").splitlines()]
    docs = read_docbin(spacy.blank("en"), tmp_path / "back.spacy")
    assert [(d.user_data["pmid"], d.text) for d in docs] == [(r["id"], r["text"]) for r in records]
    assert [[(s.start_char, s.end_char, s.label_, s.kb_id_) for s in gold_spans(d)] for d in docs] == \
        [[(m["start_char"], m["end_char"], m["label"], m["kb_id"]) for m in r["mentions"]] for r in records]
