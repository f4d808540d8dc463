"""The PubTator reader: every malformed input is refused as FILE:LINE (CorpusFormatError), or skipped
and counted when asked; BioRED-style files are read; random bytes and text raise nothing else."""
import re
import tempfile
from pathlib import Path

import pytest
import spacy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from spacy_pel.corpora import (
    NIL,
    CorpusFormatError,
    convert,
    make_doc,
    read_docbin,
    read_pubtator,
)
from spacy_pel.files import BadLines

TITLE = "100|t|Lithium and delirium."
ABSTRACT = "100|a|Famotidine-induced delirium."
DOC = f"{TITLE}\n{ABSTRACT}\n100\t0\t7\tLithium\tChemical\tD008094\n100\t12\t20\tdelirium\tDisease\tD003693\n"


def write(tmp_path: Path, data, name: str = "c.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf8"))
    return path


def refused(path: Path, line: int, fragment: str = "") -> CorpusFormatError:
    with pytest.raises(CorpusFormatError) as err:
        read_pubtator(path)
    assert str(err.value).startswith(f"{path}:{line}: "), str(err.value)
    assert fragment in str(err.value), str(err.value)
    return err.value


def test_non_utf8_byte(tmp_path):
    path = write(tmp_path, DOC.encode() + b"\n200|t|Caf\xe9.\n200|a|x\n")
    refused(path, 6, "not UTF-8 text (byte 0xe9 at column 10)")


def test_lone_carriage_return_is_text_not_a_line_break(tmp_path):
    text = "200|t|Lithium\rtoxicity.\n200|a|Delirium.\n200\t8\t16\ttoxicity\tDisease\tD064420\n200\t18\t26\tDelirium\tDisease\tD003693\n"
    (pdoc,) = read_pubtator(write(tmp_path, text))
    assert pdoc.text == "Lithium\rtoxicity. Delirium."
    assert [(a.text, a.line) for a in pdoc.annotations] == [("toxicity", 3), ("Delirium", 4)]
    doc = make_doc(spacy.blank("en"), pdoc)
    assert [e.text for e in doc.ents] == ["toxicity", "Delirium"]
    # an error after a lone \r is reported at the line an editor shows
    bad = write(tmp_path, text + "200\t0\t3\tXYZ\tDisease\tD1\n", "bad.txt")
    refused(bad, 5, "give 'Lit', not 'XYZ'")


def test_crlf_file(tmp_path):
    (pdoc,) = read_pubtator(write(tmp_path, DOC.replace("\n", "\r\n")))
    assert [a.text for a in pdoc.annotations] == ["Lithium", "delirium"]


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("100\t0\t7\tLithium\tChemical\tD008094\tLithium\textra", "not 8 columns"),
        ("100\t0\t7\tLithium\tChemical", "not 5 columns"),
        ("100\t0\t7\tLithium\t\tD008094", "empty entity type"),
        ("100\t０\t7\tLithium\tChemical\tD1", "must be integers"),
        ("999\t0\t7\tLithium\tChemical\tD1", "annotation outside its document"),
        ("999\tCID\tD1\tD2", "CID relation line outside its document"),
        ("just some text", "expected a PMID|t| title"),
    ],
)
def test_malformed_annotation_lines(tmp_path, line, fragment):
    refused(write(tmp_path, DOC + line + "\n"), 5, fragment)


def test_seven_columns_are_composite_parts(tmp_path):
    (pdoc,) = read_pubtator(write(tmp_path, DOC + "100\t0\t7\tLithium\tChemical\tD1|D2\tLi|thium\n"))
    assert pdoc.annotations[-1].ids == ["D1", "D2"]


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("", 1, "no PubTator documents"),
        ("\n\n  \n", 1, "no PubTator documents"),
        (f"{TITLE}\n", 1, "title of 100 without an abstract"),
        (f"{TITLE}\n300|t|Other.\n300|a|x\n", 1, "title of 100 without an abstract"),
        (f"{ABSTRACT}\n", 1, "abstract of 100 without its title"),
        (f"{DOC}\n{TITLE}\n{ABSTRACT}\n", 6, "document 100 appears twice (first at line 1)"),
        ("|t|No PMID\n|a|x\n", 1, "title line without a PMID"),
    ],
)
def test_document_structure_errors(tmp_path, text, line, fragment):
    refused(write(tmp_path, text), line, fragment)


BIORED = """10491763|t|Hepatocyte nuclear factor-6: associations between genetic variability and type II diabetes.
10491763|a|Hepatocyte nuclear factor (HNF)-6 is a transcription factor.
10491763\t0\t27\tHepatocyte nuclear factor-6\tGeneOrGeneProduct\t3175
10491763\t74\t90\ttype II diabetes\tDiseaseOrPhenotypicFeature\tD003924,D003920
10491763\t92\t117\tHepatocyte nuclear factor\tGeneOrGeneProduct\t-
10491763\tAssociation\t3175\tD003924\tNovel
10491763\tBind\t3175\tD003920\tNo
10491763\tPositive_Correlation\t3175\tD003924\tNovel

"""


def test_biored_style_file(tmp_path):
    relations = {}
    (pdoc,) = read_pubtator(write(tmp_path, BIORED), relations=relations)
    assert [a.ids for a in pdoc.annotations] == [["3175"], ["D003924", "D003920"], [NIL]]
    assert relations == {"Association": 1, "Bind": 1, "Positive_Correlation": 1}
    stats = convert(tmp_path / "c.txt", tmp_path / "c.spacy")
    assert stats["relations_skipped"] == relations and stats["mentions"] == 3 and stats["nil"] == 1
    (doc,) = read_docbin(spacy.blank("en"), tmp_path / "c.spacy")
    assert [e.kb_id_ for e in doc.ents] == ["3175", "D003924|D003920", NIL]


def test_bc5cdr_relations_counted():
    from .conftest import shared

    relations = {}
    read_pubtator(shared("bc5cdr", "CDR_DevelopmentSet.PubTator.txt"), relations=relations)
    assert relations == {"CID": 1012}


def test_skip_bad_lines(tmp_path):
    text = DOC + "100\t0\t7\tLithium\tChemical\tD1\tx\ty\n100\t0\t3\tXYZ\tDisease\tD1\n" + "\n" + f"{ABSTRACT.replace('100', '300')}\n300\t0\t1\tF\tChemical\tD1\n"
    path = write(tmp_path, text)
    with pytest.raises(CorpusFormatError, match=r"c\.txt:5:"):
        read_pubtator(path)
    bad = BadLines()
    (pdoc,) = read_pubtator(path, bad)
    assert len(pdoc.annotations) == 2 and bad.count == 4
    assert [re.search(r"c\.txt:(\d+):", x).group(1) for x in bad.examples] == ["5", "6", "8", "9"]
    stats = convert(path, tmp_path / "c.spacy", skip_bad_lines=True)
    assert stats["skipped_lines"] == 4 and stats["mentions"] == 2 and len(stats["skipped_examples"]) == 4
    with pytest.raises(CorpusFormatError):
        convert(path, tmp_path / "strict.spacy")
    assert not (tmp_path / "strict.spacy").exists()


# ---------------------------------------------------------------------------- property-based

FILE_LINE = re.compile(r"^(?P<path>.+):(?P<line>\d+): \S")
PIECES = ["100", "|t|", "|a|", "\t", "0", "7", "12", "Lithium", "Chemical", "D1", "-1", "-", ",", "|", "CID",
          "Association", "\n", "\n", "\r", " ", "x"]
NLP = spacy.blank("en")
# hypothesis keeps its caches out of the checkout
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "spacy_pel_hypothesis")
SETTINGS = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def check_reader(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.txt"
        path.write_bytes(data)
        n_lines = data.count(b"\n") + 1
        for bad_lines in (None, BadLines()):
            try:
                docs = read_pubtator(path, bad_lines)
            except CorpusFormatError as err:
                match = FILE_LINE.match(str(err))
                assert match and match.group("path") == str(path), str(err)
                assert 1 <= int(match.group("line")) <= n_lines, str(err)
                assert bad_lines is None or "no PubTator documents" in str(err)
            else:
                assert docs
                for pdoc in docs:
                    for ann in pdoc.annotations:
                        assert pdoc.text[ann.start : ann.end] == ann.text and ann.ids
                    make_doc(NLP, pdoc)  # every document read converts


@SETTINGS
@given(data=st.binary(max_size=400))
def test_random_bytes_raise_only_corpus_format_errors(data):
    check_reader(data)


@SETTINGS
@given(data=st.data())
def test_random_text_raise_only_corpus_format_errors(data):
    pieces = st.sampled_from(PIECES) | st.text(max_size=5)
    head = data.draw(st.sampled_from(["", DOC, TITLE + "\n" + ABSTRACT + "\n"]))
    text = head + "".join(data.draw(st.lists(pieces, max_size=40)))
    check_reader(text.encode("utf8", "surrogatepass"))


def test_ncbi_plus_joined_ids_are_split_like_pipe_and_comma_ones(tmp_path):
    """NCBI Disease joins a composite mention's ids with `+` (`D054549+D004194`): each is a gold id of its
    own, not one id no KB has (the mention would count as absent from the KB)."""
    from spacy_pel.corpora import parse_ids

    assert parse_ids("D054549+D004194") == ["D054549", "D004194"]
    assert parse_ids("D1|D2") == parse_ids("D1,D2") == parse_ids("D1 + D2") == ["D1", "D2"]
    assert parse_ids("-1") == parse_ids("-") == [NIL]
    (pdoc,) = read_pubtator(write(tmp_path, DOC + "100\t12\t20\tdelirium\tDisease\tD054549+D004194\n"))
    assert pdoc.annotations[-1].ids == ["D054549", "D004194"] and pdoc.annotations[-1].kb_id == "D054549|D004194"
