"""``convert --id-map``: gold ids of an older KB release rewritten to the current ones."""
import re

import pytest
import spacy
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.corpora import GOLD_KEY, read_docbin
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.id_map import IdMapError, map_ids, read_id_map

from .test_corpora import SAMPLE

MAP = "old_id\tnew_id\tnote\n# merged supplementary records\nD003556\tD999999\tcystitis merged\n\nD008094\tNIL\tretired\n"


def ents(path):
    (doc,) = read_docbin(spacy.blank("en"), path)
    assert [(s.text, s.kb_id_) for s in doc.spans[GOLD_KEY]] == [(e.text, e.kb_id_) for e in doc.ents]
    return [(e.text, e.kb_id_) for e in doc.ents]


def test_read_id_map_skips_header_comments_and_extra_columns(tmp_path):
    (tmp_path / "m.tsv").write_text(MAP, encoding="utf8")
    assert read_id_map(tmp_path / "m.tsv") == {"D003556": "D999999", "D008094": "NIL"}


@pytest.mark.parametrize("text, line, fragment", [
    ("A\tB\nC\n", 2, "expected OLD_ID<TAB>NEW_ID"),
    ("A\tB\nC\t\n", 2, "expected OLD_ID<TAB>NEW_ID"),
    ("A\tB\nC\tD\nA\tE\n", 3, "'A' is mapped to 'B' on line 1 and to 'E' here"),
    ("A\tB\nB\tC\n", 1, "which the map maps again (line 2)"),
    ("NIL\tA\n", 1, "NIL cannot be mapped"),
    ("-1\tA\n", 1, "-1 cannot be mapped (it means NIL"),
    ("old_id\ttype\tcandidate_new_ids\nC1\tChemical\tD1\n", 1, "a header's second column must be 'new_id' (found 'type')"),
])
def test_read_id_map_refuses_bad_lines_with_their_location(tmp_path, text, line, fragment):
    (tmp_path / "m.tsv").write_text(text, encoding="utf8")
    with pytest.raises(IdMapError, match=re.escape(fragment)) as err:
        read_id_map(tmp_path / "m.tsv")
    assert str(err.value).startswith(f"{tmp_path / 'm.tsv'}:{line}: ")


def test_a_new_id_of_minus_one_or_dash_is_nil_as_corpora_write_it(tmp_path):
    """``OLD<TAB>-1`` (BC5CDR's, the linker's PubTator output's spelling of no entry) and ``-`` (BioRED's) map
    to NIL: before, the literal id "-1" went into the corpus, neither NIL nor linkable."""
    (tmp_path / "m.tsv").write_text("C1\t-1\nC2\t-\nC3\tNIL\n", encoding="utf8")
    assert read_id_map(tmp_path / "m.tsv") == {"C1": "NIL", "C2": "NIL", "C3": "NIL"}


def test_map_ids_composite_duplicates_and_nil():
    counts = {}
    mapping = {"A": "X", "B": "X", "R": "NIL"}
    assert map_ids(["A", "C"], mapping, counts) == ["X", "C"]
    assert map_ids(["A", "B"], mapping, counts) == ["X"]  # two old ids merged into one entity
    assert map_ids(["R", "C"], mapping, counts) == ["C"]  # a retired part of a composite mention
    assert map_ids(["R"], mapping, counts) == ["NIL"]
    assert map_ids(["NIL"], mapping, counts) == ["NIL"]
    assert counts == {"A": 2, "B": 1, "R": 2}


def test_convert_with_an_id_map_rewrites_pubtator_and_spacy_inputs_alike(tmp_path):
    (tmp_path / "c.txt").write_text(SAMPLE, encoding="utf8")
    (tmp_path / "m.tsv").write_text(MAP, encoding="utf8")
    mapping = read_id_map(tmp_path / "m.tsv")
    plain = convert_corpora([tmp_path / "c.txt"], tmp_path / "plain.spacy")
    stats = convert_corpora([tmp_path / "c.txt"], tmp_path / "mapped.spacy", id_map=mapping)
    want = [("Hemorrhagic cystitis", "D006470|D999999"), ("bevacizumab", "NIL"), ("Famotidine", "D015738"),
            ("delirium", "D003693"), ("lithium", "NIL")]
    assert ents(tmp_path / "mapped.spacy") == want
    assert ents(tmp_path / "plain.spacy")[0] == ("Hemorrhagic cystitis", "D006470|D003556")
    assert stats["remapped"] == {"D003556": 1, "D008094": 1} and plain["remapped"] == {}
    assert stats["nil"] == plain["nil"] + 1 and stats["composite"] == plain["composite"]
    again = convert_corpora([tmp_path / "plain.spacy"], tmp_path / "again.spacy", id_map=mapping)
    assert ents(tmp_path / "again.spacy") == want and again["remapped"] == stats["remapped"]
    assert again["nil"] == stats["nil"]


def test_convert_cli_id_map_errors_are_one_line_and_write_nothing(tmp_path):
    (tmp_path / "c.txt").write_text(SAMPLE, encoding="utf8")
    (tmp_path / "bad.tsv").write_text("A\tB\nA\tC\n", encoding="utf8")
    (tmp_path / "m.tsv").write_text(MAP, encoding="utf8")
    runner = CliRunner()
    for id_map, fragment in ((tmp_path / "none.tsv", "id map not found"), (tmp_path / "bad.tsv", "bad.tsv:2: 'A' is mapped")):
        result = runner.invoke(app, ["convert", str(tmp_path / "c.txt"), str(tmp_path / "o.spacy"), "--id-map", str(id_map)])
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and fragment in lines[0], result.output
        assert not (tmp_path / "o.spacy").exists()
    result = runner.invoke(app, ["convert", str(tmp_path / "c.txt"), str(tmp_path / "o.spacy"), "--id-map", str(tmp_path / "m.tsv")])
    assert result.exit_code == 0, result.output
    assert "2 mention(s) of 2 old id(s) rewritten by the id map" in result.stderr
    assert ents(tmp_path / "o.spacy")[-1] == ("lithium", "NIL")
