"""A KB format added from outside the package: registered in code, or through the entry-point group."""
import os
import subprocess
import sys
import textwrap

import catalogue
import pytest

from spacy_pel import files
from spacy_pel.kb import ENTRY_POINT_GROUP, READERS, Entity, KBFormatError, kb_files, read_kb, register_kb_reader


@pytest.fixture
def tsv_format():
    """A ``tsv`` format (``id<TAB>name<TAB>alias|alias``) registered as a user would, removed afterwards."""

    @register_kb_reader("test_tsv", files=lambda path: sorted(path.glob("*.tsv")) if path.is_dir() else [path])
    def read_tsv(path, bad_lines=None):
        out = []
        for path in kb_files(path, "test_tsv"):
            for lineno, line in files.read_lines(path, KBFormatError, bad_lines):
                cols = line.split("\t")
                if len(cols) != 3:
                    files.reject(KBFormatError(path, lineno, "expected 3 tab-separated columns"), bad_lines)
                    continue
                out.append(Entity(cols[0], cols[1], [a for a in cols[2].split("|") if a]))
        return out

    yield read_tsv
    catalogue._remove(("spacy_pel", "kb_readers", "test_tsv"))


def test_a_registered_format_builds_a_kb(tmp_path, tsv_format):
    assert "test_tsv" in READERS and READERS["test_tsv"] is tsv_format
    (tmp_path / "a.tsv").write_text("X1\tLithium\tLi|Li+\nX2\tFever\t\n", encoding="utf8")
    (tmp_path / "b.tsv").write_text("X3\tAspirin\tASA\n", encoding="utf8")
    assert kb_files(tmp_path, "test_tsv") == [tmp_path / "a.tsv", tmp_path / "b.tsv"]
    entities = read_kb(tmp_path, "test_tsv")
    assert [(e.id, e.name, e.aliases) for e in entities] == [
        ("X1", "Lithium", ["Li", "Li+"]), ("X2", "Fever", []), ("X3", "Aspirin", ["ASA"])]
    (tmp_path / "b.tsv").write_text("X3\tAspirin\n", encoding="utf8")
    with pytest.raises(KBFormatError, match=r"b\.tsv:1: expected 3"):
        read_kb(tmp_path, "test_tsv")


def test_an_unregistered_format_is_refused_naming_the_known_ones(tmp_path, tsv_format):
    path = tmp_path / "kb.tsv"
    path.write_text("X1\tLithium\t\n", encoding="utf8")
    catalogue._remove(("spacy_pel", "kb_readers", "test_tsv"))
    with pytest.raises(files.InputError, match="unknown KB format 'test_tsv'; choose one of csv, jsonl, medic, mesh, obo, tsv, umls"):
        read_kb(path, "test_tsv")
    register_kb_reader("test_tsv")(tsv_format)  # the fixture removes it again


def test_the_builtin_formats_keep_their_order_and_names():
    assert list(READERS)[:5] == ["jsonl", "mesh", "medic", "obo", "umls"]
    assert "nope" not in READERS and len(READERS) >= 5
    with pytest.raises(KeyError):
        READERS["nope"]


def test_a_format_from_an_installed_package_entry_point(tmp_path):
    """A package that declares ``spacy_pel_kb_readers`` in its metadata: no import of it is needed."""
    (tmp_path / "my_kb_format.py").write_text(textwrap.dedent('''
        from spacy_pel.kb import Entity

        def read_names(path, bad_lines=None):
            with open(path, encoding="utf8") as f:
                return [Entity(f"N{i}", line.strip()) for i, line in enumerate(f) if line.strip()]
    '''), encoding="utf8")
    dist = tmp_path / "my_kb_format-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my_kb_format\nVersion: 0.1\n", encoding="utf8")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nnames = my_kb_format:read_names\n", encoding="utf8")
    kb = tmp_path / "kb.txt"
    kb.write_text("Lithium\n\nFever\n", encoding="utf8")
    code = (
        "import sys; from spacy_pel.kb import READERS, read_kb; "
        "print(sorted(READERS)); print([(e.id, e.name) for e in read_kb(sys.argv[1], 'names')])"
    )
    done = subprocess.run([sys.executable, "-c", code, str(kb)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "['csv', 'jsonl', 'medic', 'mesh', 'names', 'obo', 'tsv', 'umls']", "[('N0', 'Lithium'), ('N2', 'Fever')]"]
