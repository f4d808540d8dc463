"""KB readers: every malformed input is refused as FILE:LINE (KBFormatError), or skipped and counted
when asked; random bytes and random text raise nothing else."""
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from spacy_pel.files import BadLines
from spacy_pel.kb import KBFormatError, read_kb

GOOD = {
    "jsonl": '{"id": "A", "name": "alpha"}\n',
    "mesh": "D000001\tCalcimycin\tA-23187\tD03.633.100\t\n",
    "medic": "D000001||Calcimycin|A-23187\n",
    "obo": "format-version: 1.2\n\n[Term]\nid: X:1\nname: alpha\n",
    "umls": "C0000001|ENG|P|L0000001|PF|S0000001|Y|A0000001||M0001||MSH|PT|D000001|alpha|0|N|256|\n",
    "csv": "A,alpha\n",
    "tsv": "A\talpha\n",
}


def write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf8"))
    return path


def refused(path: Path, format: str, line: int, fragment: str = "") -> KBFormatError:
    with pytest.raises(KBFormatError) as err:
        read_kb(path, format)
    assert str(err.value).startswith(f"{path}:{line}: "), str(err.value)
    assert fragment in str(err.value), str(err.value)
    assert err.value.line == line and err.value.path == str(path)
    return err.value


@pytest.mark.parametrize("format", sorted(GOOD))
def test_non_utf8_byte_names_file_and_line(tmp_path, format):
    good = GOOD[format].encode("utf8")
    bad = {"jsonl": b'{"id": "B", "name": "caf\xe9"}\n', "mesh": b"D000002\tcaf\xe9\t\tD03\t\n",
           "medic": b"D000002||caf\xe9\n", "obo": b"synonym: \"caf\xe9\" EXACT []\n",
           "umls": b"C0000002|ENG|P|L1|PF|S1|Y|A2||M2||MSH|PT|D2|caf\xe9|0|N|256|\n",
           "csv": b"B,caf\xe9\n", "tsv": b"B\tcaf\xe9\n"}[format]
    path = write(tmp_path, f"kb.{format}", good + bad)
    line = good.count(b"\n") + 1
    refused(path, format, line, "not UTF-8 text (byte 0xe9 at column")


def test_utf8_bom_and_crlf_are_fine(tmp_path):
    path = write(tmp_path, "kb.jsonl", b'\xef\xbb\xbf{"id": "A", "name": "alpha"}\r\n{"id": "B", "name": "beta"}\r\n')
    assert [e.name for e in read_kb(path, "jsonl")] == ["alpha", "beta"]


@pytest.mark.parametrize(
    "line, fragment",
    [
        ('{"id": "B", "name": "y", "extra": "str"}', '"extra" must be an object, not str'),
        ('{"id": "B", "name": "y", "extra": [["a", 1]]}', '"extra" must be an object, not list'),
        ('{"id": "B", "name": "y", "description": 42}', '"description" must be a string, not int'),
        ('{"id": "B", "name": "y", "types": [1]}', '"types" must be a list of strings'),
        ('{"id": "B", "name": "   "}', "non-empty id and name"),
        ('{"id": "B", "name": "\\ud800"}', "unpaired surrogate"),
        ('{"id": "B", "name": "y", "n": ' + "9" * 5000 + "}", "invalid JSON"),
        ("[" * 100000, "invalid JSON"),
    ],
)
def test_jsonl_bad_field_types(tmp_path, line, fragment):
    path = write(tmp_path, "kb.jsonl", GOOD["jsonl"] + line + "\n")
    refused(path, "jsonl", 2, fragment)


@pytest.mark.parametrize(
    "stanza, line, fragment",
    [
        ("[Term]\nid: X:2\nid: X:3\nname: beta\n", 9, "second 'id' line in the stanza at line 7"),
        ("[Term]\nid: X:2\nname: beta\nname: gamma\n", 10, "second 'name' line"),
        ('[Term]\nid: X:2\nname: beta\ndef: "a" []\ndef: "b" []\n', 11, "second 'def' line"),
        ("[Term\nid: X:2\nname: beta\n", 7, "malformed stanza header '[Term'"),
        ("[Trem]\nid: X:2\nname: beta\n", 7, "unknown stanza type [Trem]"),
        ("[Term]\nid: X:2\nname beta\n", 9, "expected 'tag: value'"),
        ("[Term]\nname: beta\n", 7, "[Term] stanza without id or name"),
    ],
)
def test_obo_stanza_errors(tmp_path, stanza, line, fragment):
    path = write(tmp_path, "t.obo", GOOD["obo"] + "\n" + stanza)
    refused(path, "obo", line, fragment)


def test_obo_refused_header_does_not_merge_into_previous_term(tmp_path):
    """With --skip-bad-lines, a refused [Term header's lines are not added to the term before it."""
    path = write(tmp_path, "t.obo", GOOD["obo"] + '\n[Term\nid: X:2\nname: beta\nsynonym: "b" EXACT []\n')
    bad = BadLines()
    (entity,) = read_kb(path, "obo", bad)
    assert (entity.id, entity.name, entity.aliases) == ("X:1", "alpha", [])
    assert bad.count == 1 and "t.obo:7: malformed stanza header" in bad.examples[0]


def test_obo_comment_is_stripped_outside_quoted_strings_only(tmp_path):
    """OBO 1.4: a trailing ``! comment`` starts outside quoted strings; a def or synonym may hold `` ! ``
    and escaped quotes."""
    text = ('format-version: 1.4\n\n[Term]\nid: X:1 ! the first\nname: heart attack ! a comment\n'
            'def: "Death of heart muscle ! a very bad thing." [PMID:1 "a ! b"] ! comment\n'
            'synonym: "say \\"MI\\" ! loudly" EXACT [] ! comment "quoted"\n'
            'synonym: "plain" EXACT []\n')
    (first,) = read_kb(write(tmp_path, "t.obo", text), "obo")
    assert (first.id, first.name, first.description) == ("X:1", "heart attack", "Death of heart muscle ! a very bad thing.")
    assert first.aliases == ['say "MI" ! loudly', "plain"]
    # a quote left open is no quoted string: the comment is stripped, and the def refused as before
    refused(write(tmp_path, "u.obo", GOOD["obo"] + 'def: "open ! comment\n'), "obo", 6, "def value must start with a quoted string")


def test_ids_names_aliases_and_types_are_stripped(tmp_path):
    """White space around an id is not kept in any format (a corpus's ids are read stripped): `` D1 `` is
    ``D1``, and a second ``D1`` is a duplicate."""
    path = write(tmp_path, "kb.jsonl", '{"id": " D1 ", "name": " x ", "aliases": [" y ", "", "x", "y"], "types": [" T "]}\n')
    (entity,) = read_kb(path, "jsonl")
    assert (entity.id, entity.name, entity.aliases, entity.types) == ("D1", "x", ["y"], ["T"])
    refused(write(tmp_path, "two.jsonl", '{"id": " D1 ", "name": "x"}\n{"id": "D1", "name": "y"}\n'), "jsonl", 2,
            "duplicate entity id 'D1' (first seen at")
    refused(write(tmp_path, "blank.jsonl", '{"id": " D1 ", "name": "x"}\n{"id": " ", "name": "y"}\n'), "jsonl", 2,
            "non-empty id and name")


@pytest.mark.parametrize("format, text, line", [
    ("jsonl", GOOD["jsonl"] + '{"id": "B|C", "name": "beta"}\n', 2),
    ("obo", GOOD["obo"] + "\n[Term]\nid: X:2|X:3\nname: beta\n", 7),
    ("csv", "id,name\nA,alpha\nB|C,beta\n", 3),
    ("tsv", "A\talpha\nB|C\tbeta\n", 2),
    ("jsonl", GOOD["jsonl"] + '{"id": "B,C", "name": "beta"}\n', 2),
    ("tsv", "A\talpha\nB+C\tbeta\n", 2),
])
def test_an_id_holding_a_composite_separator_is_refused(tmp_path, format, text, line):
    """``A|B`` (PubTator), ``A,B`` (BioRED) and ``A+B`` (NCBI) are how corpora write a composite mention's ids:
    a KB id holding one of them would be read back as several."""
    sep = next(c for c in "|,+" if c in text.splitlines()[-1 if format != "obo" else -2])
    err = refused(write(tmp_path, f"kb.{format}", text), format, line, f"holds {sep!r}")
    assert "composite mention" in str(err)
    bad = BadLines()
    assert [e.id for e in read_kb(tmp_path / f"kb.{format}", format, bad) if sep in e.id] == [] and bad.count == 1


def test_mesh_descriptor_with_extra_columns(tmp_path):
    path = write(tmp_path, "m.tsv", GOOD["mesh"] + "D000002\tname\t\tD03\t\textra\n")
    refused(path, "mesh", 2, "at most 5 tab-separated columns, not 6")


@pytest.mark.parametrize("format", sorted(GOOD))
def test_empty_kb_refused(tmp_path, format):
    path = write(tmp_path, f"kb.{format}", "\n\n")
    refused(path, format, 1, "no entities")


def test_skip_bad_lines_counts_what_it_skips(tmp_path):
    data = (
        GOOD["jsonl"].encode()
        + b'{"id": "B", "name": \n'
        + b'{"id": "C", "name": "\xff"}\n'
        + b'{"id": "A", "name": "again"}\n'
        + b'{"id": "D", "name": "delta", "extra": "x"}\n'
        + b'{"id": "E", "name": "epsilon"}\n'
    )
    path = write(tmp_path, "kb.jsonl", data)
    with pytest.raises(KBFormatError, match=r"kb\.jsonl:2: invalid JSON"):
        read_kb(path, "jsonl")
    bad = BadLines()
    assert [e.id for e in read_kb(path, "jsonl", bad)] == ["A", "E"]
    assert bad.count == 4
    assert [re.match(r".*kb\.jsonl:(\d+):", x).group(1) for x in bad.examples] == ["2", "3", "4", "5"]
    assert "duplicate entity id 'A'" in bad.examples[2] and "skipped 4 malformed line(s)" in bad.summary()


# ---------------------------------------------------------------------------- property-based

FILE_LINE = re.compile(r"^(?P<path>.+):(?P<line>\d+): \S")
PIECES = {
    "jsonl": ['{"id": "A", "name": "a"}', '{"id": 1}', '{"id": "B", "name": "b", "extra": ', '"x"}', "[", "]",
              '"description": 4', "{", "}", ",", "\\u", "null", "\t", "\r", "\n"],
    "mesh": ["D000001", "C000002", "\t", "name", "|", "D01.2", ",", "*D000001", '"', "\r", "\n", " "],
    "medic": ["D000001", "||", "|", "OMIM:1", "123", "#", "name", " ", "\r", "\n", "MESH:D1"],
    "obo": ["[Term]", "[Typedef]", "[Term", "id: X:1", "name: n", "synonym: ", '"s"', " EXACT []", "def: ",
            "is_obsolete: true", "namespace: ns", "!", ":", "\r", "\n", "\n", " ! c"],
    "umls": ["C0000001", "C0000002", "|", "||", "ENG", "FRE", "P", "S", "PF", "VC", "Y", "N", "O", "MSH", "name", "\x00",
             "\r", "\n", " "],
    "csv": ["id", "name", "aliases", "Synonyms", "types", "description", "url", "A", "B", ",", '"', '""', "|", "\t", "\r",
            "\n", "\n", " ", "\x00"],
    "tsv": ["id", "name", "aliases", "types", "Description", "url", "A", "B", "\t", '"', "|", ",", "\r", "\n", "\n", " "],
}


def check_reader(data: bytes, format: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"kb.{format}"
        path.write_bytes(data)
        n_lines = data.count(b"\n") + 1
        for bad_lines in (None, BadLines()):
            try:
                entities = read_kb(path, format, bad_lines)
            except KBFormatError as err:
                match = FILE_LINE.match(str(err))
                assert match and match.group("path") == str(path), str(err)
                assert 1 <= int(match.group("line")) <= n_lines, str(err)
                assert bad_lines is None or "no entities" in str(err)
            else:
                assert entities and len({e.id for e in entities}) == len(entities)
                for entity in entities:
                    assert entity.id.strip() and entity.name.strip()
                    # everything read can be written back as UTF-8 JSON lines
                    (entity.id + entity.name + entity.description + "".join(entity.aliases)).encode("utf8")
            if bad_lines is not None:
                assert len(bad_lines.examples) == min(bad_lines.count, bad_lines.keep)
                assert all(FILE_LINE.match(x) for x in bad_lines.examples)


# hypothesis keeps its caches out of the checkout
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "spacy_pel_hypothesis")
SETTINGS = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("format", sorted(PIECES))
@SETTINGS
@given(data=st.binary(max_size=400))
def test_random_bytes_raise_only_kb_format_errors(format, data):
    check_reader(data, format)


@pytest.mark.parametrize("format", sorted(PIECES))
@SETTINGS
@given(data=st.data())
def test_random_text_raise_only_kb_format_errors(format, data):
    pieces = st.sampled_from(PIECES[format]) | st.text(max_size=6)
    text = "".join(data.draw(st.lists(pieces, max_size=40)))
    check_reader(text.encode("utf8", "surrogatepass"), format)


@pytest.mark.parametrize("nil_id", ["-1", "-", "NIL"])
def test_an_id_spelling_nil_is_refused(tmp_path, nil_id):
    """``-1`` / ``-`` (BC5CDR, BioRED) and ``NIL`` are how corpora and linked files say "no entry": a mention
    linked to such an entity would be written as NIL and read back as one."""
    err = refused(write(tmp_path, "kb.tsv", f"A\talpha\n{nil_id}\tbeta\n"), "tsv", 2, f"entity id {nil_id!r}")
    assert "NIL" in str(err)


def test_the_nil_spellings_are_the_corpus_readers():
    from spacy_pel.corpora import NIL, NO_ID
    from spacy_pel.kb.entity import NIL_IDS

    assert set(NIL_IDS) == {*NO_ID, NIL}
