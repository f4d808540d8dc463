"""What build-kb and build-names write over, and what they read back: an output that is something else is
refused (never wiped); the name indexes inside a KB folder outlive its rebuild (kept when still valid,
else set aside, never deleted); --add keeps the KB's build record; a KB records a local encoder by its
absolute path; a damaged KB folder is one line; --index ivfpq on a small KB fails before encoding."""
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import spacy
from typer.testing import CliRunner

import spacy_pel.retrieval.build as build
from spacy_pel.cli import app
from spacy_pel.files import InputError
from spacy_pel.models.encoder import DEFAULT_ENCODER, BiEncoder
from spacy_pel.pipeline.retarget import linker_overrides
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.encoder_record import encoder_location
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.retrieval.names import NameIndex, build_names
from tests.test_cli_errors import one_line_error

from .conftest import KB_LINES


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])



def hidden(folder: Path):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture
def extra(tmp_path) -> Path:
    path = tmp_path / "extra.jsonl"
    path.write_text('{"id": "D9", "name": "heparin", "aliases": ["UFH"]}\n', encoding="utf8")
    return path


# ---------------------------------------------------------------------------- build-names -o


def test_build_names_refuses_an_output_that_is_not_a_name_index(kb_dir, tmp_path):
    """Defect: a folder holding thesis.txt was wiped; a file was replaced by a folder (kept hidden as .P.old-PID)."""
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "thesis.txt").write_text("data", encoding="utf8")
    one_line_error(run("build-names", kb_dir, "-o", folder), f"output {folder} is a folder that is not a name index")
    assert [p.name for p in folder.iterdir()] == ["thesis.txt"]
    afile = tmp_path / "f.txt"
    afile.write_text("x", encoding="utf8")
    one_line_error(run("build-names", kb_dir, "-o", afile), f"output {afile} is a file")
    assert afile.read_text(encoding="utf8") == "x" and hidden(tmp_path) == []
    one_line_error(run("build-names", kb_dir, "-o", kb_dir), "is a folder that is not a name index")  # a KB is not one
    with pytest.raises(InputError, match="not a name index"):
        build_names(kb_dir, folder, progress=False, force=True)  # --force replaces name indexes only
    (folder / "thesis.txt").unlink()  # an empty folder, or a name index, is written to
    assert build_names(kb_dir, folder, progress=False)["names"] > 5
    assert build_names(kb_dir, folder, progress=False)["names"] > 5


# ---------------------------------------------------------------------------- name indexes in a rebuilt KB


def test_a_rebuild_of_an_unchanged_kb_keeps_its_name_index(kb_dir, kb_file, tiny_encoder_dir):
    """Defect: build-kb into a KB folder deleted KB/names (build-names' default output)."""
    build_names(kb_dir, progress=False)
    before = {p.name: p.read_bytes() for p in (kb_dir / "names").iterdir()}
    result = run("build-kb", "--kb", kb_file, "-o", kb_dir, "--encoder", tiny_encoder_dir, "--index", "hnsw")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name_indexes"] == {"kept": ["names"]}
    assert {p.name: p.read_bytes() for p in (kb_dir / "names").iterdir()} == before
    index = EntityIndex.from_disk(kb_dir)
    NameIndex.from_disk(kb_dir / "names").check(BiEncoder.from_pretrained(str(tiny_encoder_dir)), index.entities.ids)
    assert hidden(kb_dir.parent) == [] and not list(kb_dir.parent.glob("*.old*"))


def test_name_indexes_the_new_kb_does_not_match_are_set_aside_with_a_warning(kb_dir, kb_file, extra, tmp_path):
    build_names(kb_dir, progress=False)
    build_names(kb_dir, kb_dir / "by_types", input="name_types", progress=False)
    before = (kb_dir / "names" / "names.json").read_text(encoding="utf8")
    result = run("build-kb", "--add", extra, "-o", kb_dir)
    assert result.exit_code == 0, result.output
    aside = {"names": str(tmp_path / "kb.names.old"), "by_types": str(tmp_path / "kb.by_types.old")}
    assert json.loads(result.stdout)["name_indexes"] == {"set_aside": aside}
    warnings = [ln for ln in result.stderr.splitlines() if "moved to" in ln]
    assert len(warnings) == 2 and all("--reuse" in ln for ln in warnings), result.stderr
    assert not (kb_dir / "names").exists() and (tmp_path / "kb.names.old" / "names.json").read_text(encoding="utf8") == before
    # the set-aside rows are what the next build reuses: only the added entity's names are encoded
    report = build_names(kb_dir, progress=False, reuse=tmp_path / "kb.names.old")
    assert report["resume"]["reuse"]["encoded"] == 2 and report["entities"] == 6
    # an entity renamed, ids unchanged: the rows no longer hold either (a second set-aside gets its own name)
    changed = tmp_path / "changed.jsonl"
    changed.write_text("\n".join([KB_LINES[0].replace("Li2CO3", "lithium salt"), *KB_LINES[1:]]) + "\n", encoding="utf8")
    report = build_kb(changed, kb_dir, encoder=EntityIndex.from_disk(kb_dir).encoder_source, progress=False, force=True)
    assert report["name_indexes"] == {"set_aside": {"names": str(tmp_path / "kb.names.old2")}}
    assert sorted(p.name for p in tmp_path.glob("kb.*.old*")) == ["kb.by_types.old", "kb.names.old", "kb.names.old2"]


# ---------------------------------------------------------------------------- --add keeps the build record


def test_add_keeps_the_build_record_and_lists_each_file_added(kb_dir, extra, tmp_path):
    """Defect: --add rewrote stamp.json with only the added file (input hash, format, counts lost)."""
    record = json.loads((kb_dir / "stamp.json").read_text(encoding="utf8"))
    build_kb(None, kb_dir, add=extra, progress=False)
    more = tmp_path / "more.jsonl"
    more.write_text('{"id": "D10", "name": "insulin"}\n', encoding="utf8")
    build_kb(None, kb_dir, add=more, progress=False)
    stamp = json.loads((kb_dir / "stamp.json").read_text(encoding="utf8"))
    assert {k: v for k, v in stamp.items() if k != "added"} == record
    assert [(a["kb"], a["format"]) for a in stamp["added"]] == [(str(extra), "jsonl"), (str(more), "jsonl")]
    assert all(len(a["input_sha256"]) == 64 for a in stamp["added"])


# ---------------------------------------------------------------------------- the encoder a KB records


def test_a_kb_records_a_local_encoder_by_its_absolute_path(kb_file, tiny_encoder_dir, tmp_path, monkeypatch, extra):
    """Defect: --encoder enc was stored as "enc": from another directory the KB's encoder was not found."""
    shutil.copytree(tiny_encoder_dir, tmp_path / "enc")
    monkeypatch.chdir(tmp_path)
    build_kb(Path(kb_file.name), Path("kb"), encoder="enc", progress=False)  # kb_file is tmp_path/kb.jsonl
    assert EntityIndex.read_meta(tmp_path / "kb")["encoder_source"] == str(tmp_path / "enc")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert build_names(tmp_path / "kb", progress=False)["names"] > 5
    assert build_kb(None, tmp_path / "kb", add=extra, progress=False)["entities_total"] == 6
    assert encoder_location(DEFAULT_ENCODER) == DEFAULT_ENCODER
    assert encoder_location("org/some-model") == "org/some-model"  # a Hugging Face name as given


def test_a_kb_moved_with_its_encoder_still_finds_it(kb_file, tiny_encoder_dir, tmp_path, monkeypatch, extra):
    """Defect: the encoder was recorded by its absolute path only: once the project was moved (renamed,
    copied to a server or a CI cache), build-names, --add, retarget and a linker given only the KB failed
    with 'encoder folder not found: <old path>', though the encoder had moved with the KB."""
    project = tmp_path / "project"
    shutil.copytree(tiny_encoder_dir, project / "training" / "best")
    monkeypatch.chdir(project)
    build_kb(Path(kb_file), Path("kbs/final"), encoder="training/best", progress=False)
    build_kb(Path(kb_file), Path("kbs/copy"), encoder="training/best", reuse=Path("kbs/final"), progress=False)
    meta = EntityIndex.read_meta(project / "kbs" / "copy")
    assert meta["encoder_source_from_kb"] == os.path.join("..", "..", "training", "best")
    moved = tmp_path / "moved"
    project.rename(moved)
    monkeypatch.chdir(tmp_path)
    for kb in ("final", "copy"):  # built, and copied by --reuse
        assert EntityIndex.from_disk(moved / "kbs" / kb).encoder_source == str(moved / "training" / "best")
    assert build_names(moved / "kbs" / "copy", progress=False)["names"] > 5
    assert build_kb(None, moved / "kbs" / "final", add=extra, progress=False)["entities_total"] == 6
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(moved / "kbs" / "final")})
    nlp.initialize()
    pipeline = tmp_path / "pipeline"
    nlp.to_disk(pipeline)
    other = EntityIndex.from_disk(moved / "kbs" / "copy")
    other.fingerprint = "another"  # a KB another entity tower encoded: its own encoder is named
    other.to_disk(tmp_path / "kbs_other")
    assert linker_overrides(pipeline, tmp_path / "kbs_other")["components.pel_linker.encoder"] == str(moved / "training" / "best")


# ---------------------------------------------------------------------------- a damaged KB folder


@pytest.mark.parametrize("damage", ["garbage", "header cut", "rows cut", "one dimension"])
def test_a_damaged_kb_folder_is_one_line_naming_the_file(kb_dir, extra, damage):
    """Defect: a ValueError traceback from evaluate --kb, build-names, build-kb --add and retarget."""
    vectors = kb_dir / "embeddings.npy"
    data = vectors.read_bytes()
    if damage == "garbage":
        vectors.write_bytes(b"\x80\x04garbage")
    elif damage == "header cut":
        vectors.write_bytes(data[:90])
    elif damage == "rows cut":
        vectors.write_bytes(data[:-40])
    else:
        np.save(vectors, np.zeros(5, np.float16))
    with pytest.raises(InputError, match=f"KB folder {kb_dir} is damaged: embeddings.npy"):
        EntityIndex.from_disk(kb_dir)
    one_line_error(run("build-names", kb_dir), f"KB folder {kb_dir} is damaged: embeddings.npy", "rebuild")
    one_line_error(run("build-kb", "--add", extra, "-o", kb_dir), "is damaged: embeddings.npy")


def test_a_damaged_entity_table_or_name_index_is_one_line(kb_dir):
    build_names(kb_dir, progress=False)
    (kb_dir / "names" / "entity_rows.npy").write_bytes(b"garbage")
    with pytest.raises(InputError, match="name index .*names is damaged"):
        NameIndex.from_disk(kb_dir / "names")
    (kb_dir / "offsets.npy").write_bytes((kb_dir / "offsets.npy").read_bytes()[:100])
    one_line_error(run("build-names", kb_dir), f"KB folder {kb_dir} is damaged")


# ---------------------------------------------------------------------------- --index ivfpq on a small KB


def test_ivfpq_on_a_small_kb_fails_before_encoding(kb_file, tmp_path, tiny_encoder_dir, monkeypatch):
    """Defect: a traceback after encoding, and OUTPUT.partial left behind."""
    def no_encoder(*args, **kwargs):
        raise AssertionError("the encoder was loaded")

    monkeypatch.setattr(build, "load_encoder", no_encoder)
    out = tmp_path / "kb_i"
    one_line_error(run("build-kb", "--kb", kb_file, "-o", out, "--encoder", tiny_encoder_dir, "--index", "ivfpq"),
                   "--index ivfpq needs at least 10,000 entities", "has 5", "flat")
    assert sorted(os.listdir(tmp_path)) == ["kb.jsonl"]  # no kb_i, kb_i.partial or lock file
