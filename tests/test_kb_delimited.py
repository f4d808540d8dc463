"""KB tables (``csv`` / ``tsv``): spaCy's tutorial ``entities.csv`` without a header, named columns in any
order with several values per cell, quoting, and every malformed row named by its line."""
from pathlib import Path

import pytest

from spacy_pel.files import BadLines
from spacy_pel.kb import KBFormatError, read_kb

from .conftest import shared


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf8")
    return path


def refused(path: Path, format: str, line: int, fragment: str) -> None:
    with pytest.raises(KBFormatError) as err:
        read_kb(path, format)
    assert str(err.value).startswith(f"{path}:{line}: ") and fragment in str(err.value), str(err.value)


def test_spacy_tutorial_entities_csv():
    entities = read_kb(shared("nel-emerson", "entities.csv"), "csv")
    assert [(e.id, e.name, e.description) for e in entities] == [
        ("Q312545", "Roy Stanley Emerson", "Australian tennis player"),
        ("Q48226", "Ralph Waldo Emerson", "American philosopher, essayist, and poet"),
        ("Q215952", "Emerson Ferreira da Rosa", "Brazilian footballer"),
    ]
    assert all(not e.aliases and not e.types for e in entities)


def test_header_names_columns_in_any_order(tmp_path):
    text = ('Description,ID,Synonyms,name,Type,url\n'
            '"a salicylate, against pain",P1,aspirin|ASA|acetylsalicylic acid,acetylsalicylic acid,drug|NSAID,http://x/1\n'
            '"two\nlines",P2,,paracetamol,drug,\n')
    first, second = read_kb(write(tmp_path, "kb.csv", text), "csv")
    assert (first.id, first.name, first.aliases, first.types) == ("P1", "acetylsalicylic acid", ["aspirin", "ASA"], ["drug", "NSAID"])
    assert first.description == "a salicylate, against pain" and first.extra == {"url": "http://x/1"}
    (third,) = read_kb(write(tmp_path, "blank.csv", "id,name,\nP3,x,kept\n"), "csv")  # a column without a header
    assert third.extra == {"column 3": "kept"}
    assert (second.id, second.name, second.description, second.extra) == ("P2", "paracetamol", "two\nlines", {})


def test_tsv_splits_at_tabs_only(tmp_path):
    text = 'id\tname\taliases\nT1\t"Weird" syndrome\tW, S|"ws"\n'
    (entity,) = read_kb(write(tmp_path, "kb.tsv", text), "tsv")
    assert (entity.name, entity.aliases) == ('"Weird" syndrome', ["W, S", '"ws"'])


def test_csv_without_header_is_id_name_description(tmp_path):
    first, second = read_kb(write(tmp_path, "kb.csv", "A,alpha\nB,beta,the second letter\n"), "csv")
    assert (first.id, first.name, first.description) == ("A", "alpha", "")
    assert (second.id, second.name, second.description) == ("B", "beta", "the second letter")


@pytest.mark.parametrize("format, text, line, fragment", [
    ("csv", "id,name,types\nA,alpha,x\nB,beta\n", 3, "2 columns where the header (line 1) has 3"),
    ("csv", "\n\nid,name\nA,alpha,extra\n", 4, "3 columns where the header (line 3) has 2"),
    ("csv", "A,alpha\nB,beta,desc,more\n", 2, "without a header line a row is id, name and an optional description"),
    ("csv", "A\n", 1, "1 column(s)"),
    ("csv", 'A,alpha\nB,"beta\nC,gamma\n', 2, "not a valid CSV row"),
    ("csv", 'A,alpha\nB,"be"ta"\n', 2, "not a valid CSV row"),
    ("csv", "id,name,synonyms,aliases\nA,alpha,,\n", 1, "the header names aliases more than once"),
    ("csv", "id,name,url,URL\nA,alpha,x,y\n", 1, "the header names URL, url more than once"),
    ("csv", "A,alpha\nA,again\n", 2, "duplicate entity id 'A' (first seen at"),
    ("csv", "A,\n", 1, "non-empty id and name"),
    ("tsv", "id\tname\nA\talpha\tx\n", 2, "3 columns where the header (line 1) has 2"),
])
def test_malformed_rows_name_their_line(tmp_path, format, text, line, fragment):
    refused(write(tmp_path, f"kb.{format}", text), format, line, fragment)


def test_skip_bad_lines_keeps_the_rest(tmp_path):
    path = write(tmp_path, "kb.csv", "id,name\nA,alpha\nB,beta,x\nC,gamma\n")
    bad = BadLines()
    assert [e.id for e in read_kb(path, "csv", bad)] == ["A", "C"]
    assert bad.count == 1 and "kb.csv:3: 3 columns" in bad.examples[0]
    header = write(tmp_path, "twice.csv", "id,name,name\nA,alpha,beta\n")
    with pytest.raises(KBFormatError, match=r"no entities in this csv KB \(1 malformed line\(s\) skipped\)"):
        read_kb(header, "csv", BadLines())
