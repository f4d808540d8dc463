"""BioC XML / JSON input (spacy_pel.bioc_corpus, read with PyPI ``bioc``): the same documents as the
PubTator route, NIL / composite ids and relations handled alike, every malformed input refused with the
file and the location (document id, passage offset, annotation id) or FILE:LINE for syntax errors."""
import json
import re
import tempfile
from pathlib import Path

import bioc
import pytest
import spacy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir
from typer.testing import CliRunner

from spacy_pel.bioc_corpus import BioCFormatError, pubtator_to_bioc, read_bioc
from spacy_pel.cli.convert import app
from spacy_pel.corpora import NIL, CorpusFormatError, gold_spans, make_doc, read_docbin, read_pubtator
from spacy_pel.corpus_formats import convert_corpora, corpus_format
from spacy_pel.files import BadLines, InputError

from .conftest import shared

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "assets" / "demo" / "bc5cdr_dev_sample.PubTator.txt"
NLP = spacy.blank("en")

XML = """<?xml version='1.0' encoding='UTF-8'?>
<collection><source>test</source><date>2024</date><key>k</key>
<document><id>100</id>
<passage><infon key="type">title</infon><offset>0</offset><text>Lithium and delirium.</text>
<annotation id="T1"><infon key="type">Chemical</infon><infon key="MESH">D008094</infon>
<location offset="0" length="7"/><text>Lithium</text></annotation>
</passage>
<passage><infon key="type">abstract</infon><offset>25</offset>
<sentence><offset>25</offset><text>Famotidine-induced delirium and</text>
<annotation id="T2"><infon key="type">Disease</infon><infon key="identifier">D003693,D001</infon>
<location offset="44" length="8"/><text>delirium</text></annotation></sentence>
<sentence><offset>57</offset><text>unknown toxicity.</text>
<annotation id="T3"><infon key="type">Disease</infon><infon key="identifier">-1</infon>
<location offset="57" length="16"/><text>unknown toxicity</text></annotation></sentence>
<annotation id="T4"><infon key="type">Chemical</infon>
<location offset="25" length="10"/><text>Famotidine</text></annotation>
<relation id="R1"><infon key="type">CID</infon><node refid="T1" role="Chemical"/></relation>
</passage>
<annotation id="T5"><infon key="type">Disease</infon><infon key="identifier">D2+D3</infon>
<location offset="12" length="4"/><location offset="44" length="4"/><text>deli del</text></annotation>
<relation id="R2"><infon key="relation">Association</infon></relation>
</document>
</collection>
"""


def write(tmp_path: Path, text: str, name: str = "c.xml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf8")
    return path


def doc_summary(doc):
    return ([t.text for t in doc], [t.whitespace_ for t in doc], doc.user_data.get("pmid"),
            [(s.start, s.end, s.label_, s.kb_id_) for s in gold_spans(doc)],
            [(s.start, s.end, s.label_, s.kb_id_) for s in doc.ents])



def round_trip(pubtator: Path, tmp_path: Path) -> None:
    """PubTator → BioC XML and JSON (written by the bioc library) → .spacy equals PubTator → .spacy."""
    collection = pubtator_to_bioc(read_pubtator(pubtator))
    xml, js = tmp_path / "c.xml", tmp_path / "c.json"
    with open(xml, "w", encoding="utf8") as fp:
        bioc.biocxml.dump(collection, fp)
    with open(js, "w", encoding="utf8") as fp:
        bioc.biocjson.dump(collection, fp)
    want_stats = convert_corpora([pubtator], tmp_path / "p.spacy")
    want = [doc_summary(d) for d in read_docbin(NLP, tmp_path / "p.spacy")]
    assert want and sum(len(w[3]) for w in want) == want_stats["mentions"] > 0
    for path in (xml, js):
        stats = convert_corpora([path], tmp_path / "b.spacy")
        got = [doc_summary(d) for d in read_docbin(NLP, tmp_path / "b.spacy")]
        assert got == want
        for key in ("docs", "mentions", "nil", "composite", "overlapping", "unaligned", "relations_skipped"):
            assert stats[key] == want_stats[key], key


def test_round_trip_on_the_demo_sample(tmp_path):
    round_trip(DEMO, tmp_path)


@pytest.mark.slow
def test_round_trip_on_bc5cdr_dev(tmp_path):
    path = shared("bc5cdr", "CDR_DevelopmentSet.PubTator.txt")
    if not path.exists():
        pytest.skip("no BC5CDR dev set")
    round_trip(path, tmp_path)


def test_levels_ids_nil_and_relations(tmp_path):
    relations: dict = {}
    (pdoc,) = read_bioc(write(tmp_path, XML), relations=relations)
    assert pdoc.pmid == "100"
    assert pdoc.text == "Lithium and delirium.    Famotidine-induced delirium and unknown toxicity."
    got = [(a.start, a.end, a.text, a.type, a.ids) for a in pdoc.annotations]
    assert got == [(0, 7, "Lithium", "Chemical", ["D008094"]),
                   (12, 48, pdoc.text[12:48], "Disease", ["D2", "D3"]),  # two locations: the text they cover
                   (25, 35, "Famotidine", "Chemical", [NIL]),             # no id infon: NIL
                   (44, 52, "delirium", "Disease", ["D003693", "D001"]),  # composite, comma-joined
                   (57, 73, "unknown toxicity", "Disease", [NIL])]        # -1: NIL
    assert relations == {"CID": 1, "Association": 1}
    doc = make_doc(NLP, pdoc)
    assert [s.kb_id_ for s in gold_spans(doc)] == ["D008094", "D2|D3", NIL, "D003693|D001", NIL]
    as_json = pubtator_to_bioc([pdoc])
    path = tmp_path / "c.json"
    path.write_text(bioc.biocjson.dumps(as_json), encoding="utf8")
    (again,) = read_bioc(path)
    assert [(a.start, a.end, a.ids) for a in again.annotations] == [(a.start, a.end, a.ids) for a in pdoc.annotations]


def location_error(path: Path, *fragments: str) -> BioCFormatError:
    with pytest.raises(BioCFormatError) as err:
        read_bioc(path)
    assert isinstance(err.value, CorpusFormatError)
    assert str(err.value).startswith(f"{path}:"), str(err.value)
    for fragment in fragments:
        assert fragment in str(err.value), str(err.value)
    return err.value


@pytest.mark.parametrize("old,new,fragments", [
    ('<location offset="0" length="7"/><text>Lithium', '<location offset="0" length="7"/><text>Lithiun',
     ["document '100', passage at offset 0, annotation 'T1'", "gives 'Lithium', not 'Lithiun'"]),
    ('<infon key="type">Chemical</infon><infon key="MESH">', '<infon key="MESH">', ["annotation 'T1'", "`type` infon"]),
    ('<location offset="57" length="16"/>', '<location offset="57" length="99"/>',
     ["sentence at offset 57, annotation 'T3'", "outside the document text"]),
    ('<id>100</id>', '<id></id>', ["the document at line 3", "without an id"]),
    ("<offset>25</offset>\n<sentence>", "<offset>2</offset>\n<sentence>", ["document '100'", "overlaps"]),
    ('<location offset="0" length="7"/><text>Lithium', '<location offset="x" length="7"/><text>Lithium',
     ["document '100'", "ValueError"]),
])
def test_xml_errors_name_the_location(tmp_path, old, new, fragments):
    assert old in XML
    location_error(write(tmp_path, XML.replace(old, new, 1)), *fragments)


def test_duplicate_documents_and_syntax_errors(tmp_path):
    doc = XML[XML.index("<document>") : XML.index("</collection>")]
    twice = XML.replace("</collection>", doc.replace("Lithium and", "Lithium and") + "</collection>")
    location_error(write(tmp_path, twice), "document '100'", "appears twice")
    broken = XML.replace("</passage>", "</pasage>", 1)
    err = location_error(write(tmp_path, broken, "b.xml"), "not well-formed BioC XML")
    assert err.line == 7 and str(err).startswith(f"{tmp_path / 'b.xml'}:7: ")
    location_error(write(tmp_path, "<collection></collection>", "e.xml"), "no BioC documents")


def test_json_errors(tmp_path):
    err = location_error(write(tmp_path, '{"documents": [\n{"id": "1",,}]}', "a.json"), "not valid JSON")
    assert err.line == 2
    location_error(write(tmp_path, '[{"id": "1"}]', "b.json"), "collection", "`documents` list")
    location_error(write(tmp_path, '{"documents": [{"id": "7"}]}', "c.json"), "document '7'", "missing BioC field 'infons'")
    location_error(write(tmp_path, '{"documents": [5]}', "d.json"), "document #1", "not a BioC document")


def test_a_utf8_bom_is_fine_in_json_as_in_xml(tmp_path):
    """A BioC file saved with a UTF-8 byte order mark (Windows tools write one) reads as without it."""
    (pdoc,) = read_bioc(write(tmp_path, XML))
    as_json = bioc.biocjson.dumps(pubtator_to_bioc([pdoc]))
    for name, text in (("bom.json", as_json), ("bom.xml", XML)):
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf8"))
        (again,) = read_bioc(path)
        assert (again.pmid, again.text) == (pdoc.pmid, pdoc.text)
        assert [(a.start, a.end, a.ids) for a in again.annotations] == [(a.start, a.end, a.ids) for a in pdoc.annotations]
    broken = tmp_path / "broken.json"
    broken.write_bytes(b"\xef\xbb\xbf" + as_json.encode("utf8").replace(b'"documents"', b'\n"documents",', 1))
    assert location_error(broken, "not valid JSON").line == 2  # lines counted as without the mark


def test_skip_bad_lines_keeps_the_rest(tmp_path):
    bad = XML.replace("<text>Lithium</text>", "<text>Lithiun</text>")
    bad_lines = BadLines()
    (pdoc,) = read_bioc(write(tmp_path, bad), bad_lines=bad_lines)
    assert [a.text for a in pdoc.annotations][0] != "Lithium" and len(pdoc.annotations) == 4
    assert bad_lines.count == 1 and "annotation 'T1'" in bad_lines.examples[0]
    stats = convert_corpora([tmp_path / "c.xml"], tmp_path / "o.spacy", skip_bad_lines=True)
    assert stats["skipped_lines"] == 1 and stats["mentions"] == 4


def test_formats_and_several_inputs(tmp_path):
    assert [corpus_format(p) for p in ("a.xml", "a.JSON", "a.spacy", "a.txt")] == ["bioc-xml", "bioc-json", "spacy", "pubtator"]
    assert corpus_format("a.txt", "bioc-xml") == "bioc-xml"
    with pytest.raises(InputError, match="unknown corpus format 'brat'"):
        corpus_format("a.txt", "brat")
    xml = write(tmp_path, XML, "corpus.bioc")  # no telling extension: --format says it
    with pytest.raises(CorpusFormatError, match="corpus.bioc:1: "):
        convert_corpora([xml], tmp_path / "o.spacy")  # read as PubTator by default
    convert_corpora([DEMO], tmp_path / "demo.spacy")
    result = CliRunner().invoke(app, [str(xml), str(DEMO), str(tmp_path / "demo.spacy"), str(tmp_path / "all.spacy"),
                                      "--format", "bioc-xml"])
    assert result.exit_code == 2 and f"{DEMO}:1: not well-formed BioC XML" in result.output  # --format is for every input
    # three inputs in three formats, each document once (the same document twice is not two documents)
    convert_corpora([write(tmp_path, XML.replace("<id>100</id>", "<id>101</id>"), "other.xml")], tmp_path / "other.spacy")
    result = CliRunner().invoke(app, [str(write(tmp_path, XML)), str(DEMO), str(tmp_path / "other.spacy"), str(tmp_path / "all.spacy")])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    assert stats["formats"] == ["bioc-xml", "pubtator", "spacy"]
    demo = read_docbin(NLP, tmp_path / "demo.spacy")
    docs = read_docbin(NLP, tmp_path / "all.spacy")
    assert len(docs) == 2 + len(demo) == stats["docs"]
    assert [doc_summary(d) for d in docs[1:-1]] == [doc_summary(d) for d in demo]
    assert [d.user_data.get("pmid") for d in (docs[0], docs[-1])] == ["100", "101"]


# ---------------------------------------------------------------- fuzzing
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "spacy_pel_hypothesis")
SETTINGS = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
LOCATION = re.compile(r"^(?P<path>.+?):(?P<line>\d+)?:? \S")
JSON_TEXT = bioc.biocjson.dumps(bioc.biocxml.loads(XML), indent=1)
XML_PIECES = ["<", ">", "</", "document", "passage", "annotation", "offset", "location", "text", "id", '"', "=",
              "0", "7", "-1", "\n", " ", "infon", "relation", "sentence"]
JSON_PIECES = ["{", "}", "[", "]", '"', ":", ",", "offset", "length", "documents", "passages", "annotations",
               "locations", "infons", "id", "text", "0", "7", "-1", "null", "true", "\n"]


def check_reader(data: bytes, suffix: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"c{suffix}"
        path.write_bytes(data)
        for bad_lines in (None, BadLines()):
            try:
                docs = read_bioc(path, bad_lines=bad_lines)
            except CorpusFormatError as err:
                assert str(err).startswith(f"{path}:"), str(err)
                assert err.line <= data.count(b"\n") + 1, str(err)
            else:
                for pdoc in docs:
                    for ann in pdoc.annotations:
                        assert pdoc.text[ann.start : ann.end] == ann.text and ann.ids
                    make_doc(NLP, pdoc)


def mutate(data, text: str, pieces) -> str:
    """``text`` with a few random cuts, insertions and replacements."""
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 12)))
        text = text[:i] + data.draw(st.sampled_from(pieces) | st.text(max_size=4)) + text[j:]
    return text


@SETTINGS
@given(data=st.binary(max_size=300), suffix=st.sampled_from([".xml", ".json"]))
def test_random_bytes_raise_only_corpus_format_errors(data, suffix):
    check_reader(data, suffix)


@SETTINGS
@given(data=st.data())
def test_mutated_xml_raises_only_corpus_format_errors(data):
    check_reader(mutate(data, XML, XML_PIECES).encode("utf8", "surrogatepass"), ".xml")


@SETTINGS
@given(data=st.data())
def test_mutated_json_raises_only_corpus_format_errors(data):
    check_reader(mutate(data, JSON_TEXT, JSON_PIECES).encode("utf8", "surrogatepass"), ".json")


def test_a_malformed_xml_document_costs_only_itself(tmp_path):
    """Defect: bioc's XML reader reads a document ahead and stops at the first malformed one, so with
    --skip-bad-lines the documents before and after it were lost too (one skip counted), and the error named
    'the document after' the one before the bad one."""
    doc = XML[XML.index("<document>") : XML.index("</collection>")]
    docs = [doc.replace("<id>100</id>", f"<id>{i}</id>") for i in (1, 2, 3, 4)]
    docs[2] = docs[2].replace("<offset>25</offset>", "", 1)  # document 3: a passage without its offset
    path = write(tmp_path, XML[: XML.index("<document>")] + "".join(docs) + "</collection>\n")
    location_error(path, "document '3'", "not a BioC document")
    bad = BadLines()
    assert [d.pmid for d in read_bioc(path, bad_lines=bad)] == ["1", "2", "4"]
    assert bad.count == 1


def test_a_title_passage_is_kept_as_the_title(tmp_path):
    """Defect: a BioC document's title passage was not known as a title, so link wrote it into PubTator's |t|
    line with the abstract (an empty |a| line) and into one BioC passage."""
    text = XML.replace("<offset>25</offset>", "<offset>22</offset>").replace(
        '<location offset="44" length="8"/>', '<location offset="41" length="8"/>').replace(
        '<location offset="57" length="16"/>', '<location offset="54" length="16"/>').replace(
        "<sentence><offset>25</offset>", "<sentence><offset>22</offset>").replace(
        "<sentence><offset>57</offset>", "<sentence><offset>54</offset>").replace(
        '<location offset="25" length="10"/>', '<location offset="22" length="10"/>').replace(
        '<location offset="12" length="4"/><location offset="44" length="4"/>',
        '<location offset="12" length="4"/><location offset="41" length="4"/>')
    (pdoc,) = read_bioc(write(tmp_path, text))
    assert pdoc.title_length == len("Lithium and delirium.") and pdoc.text.startswith("Lithium and delirium. Famotidine")
    assert [p.infons["type"] for p in pubtator_to_bioc([pdoc]).documents[0].passages] == ["title", "abstract"]
    (apart,) = read_bioc(write(tmp_path, XML, "gap.xml"))  # the abstract not right after the title and a space
    assert apart.title_length is None
