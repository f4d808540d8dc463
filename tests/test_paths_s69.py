"""Inputs and outputs as a user's file system has them: what a run's checkpoint depends on in a KB folder."""
import json
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

import spacy_pel.cli.visualize as visualize_cli
from spacy_pel.cli import app
from spacy_pel.files import atomic_write
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.retrieval.build import build_kb
from spacy_pel.training.run_config import input_digests, save_run_config, stale_checkpoint, start_run
from tests.test_cli_errors import corpus, one_line_error


def test_a_kb_folders_name_rows_and_hidden_files_do_not_make_a_checkpoint_stale(kb_dir):
    """``build-names KB`` writes ``KB/names`` (no trainer reads it): before, the KB folder's digest changed and
    the next ``train`` discarded its checkpoint ("a run that read other contents for paths.kb")."""
    raw = {"paths": {"kb": str(kb_dir)}}
    before = input_digests(raw)
    (kb_dir / "names").mkdir()
    (kb_dir / "names" / "meta.json").write_text(json.dumps({"kb_ids_sha256": "x"}), encoding="utf8")
    (kb_dir / "names" / "embeddings.npy").write_bytes(b"rows")
    (kb_dir / ".meta.json.tmp-123").write_text("a write in progress", encoding="utf8")
    (kb_dir / "names.partial").mkdir()  # an interrupted build-names: its work folder and lock
    (kb_dir / "names.partial" / "chunk_0.npy").write_bytes(b"part")
    (kb_dir / "names.lock").write_text("", encoding="utf8")
    assert input_digests(raw) == before
    (kb_dir / "notes").mkdir()  # any other folder is read as the KB's
    (kb_dir / "notes" / "x.txt").write_text("x", encoding="utf8")
    assert input_digests(raw) != before


def test_outputs_are_written_through_symlinks_and_streams_are_not_replaced(tmp_path, kb_file, tiny_encoder_dir):
    """A KB folder kept elsewhere and linked into the project (kbs/mesh -> /data/kbs/mesh), a linked output file:
    before, the link was renamed aside and a real folder / file put in its place (the data beside the link, its
    target keeping the old contents). A stream (a link to /dev/null, as /dev/stdout links to a descriptor) was
    replaced by a regular file (as root: the system's /dev/stdout)."""
    big = tmp_path / "big_disk" / "kb"
    build_kb(kb_file, big, encoder=str(tiny_encoder_dir), progress=False)
    (tmp_path / "kbs").mkdir()
    (tmp_path / "kbs" / "kb").symlink_to(big)
    (tmp_path / "more.jsonl").write_text('{"id": "D9", "name": "heparin"}\n', encoding="utf8")
    build_kb(None, tmp_path / "kbs" / "kb", encoder=str(tiny_encoder_dir), add=tmp_path / "more.jsonl",
             progress=False)
    assert (tmp_path / "kbs" / "kb").is_symlink() and json.loads((big / "meta.json").read_text())["entities"] == 6
    assert [p.name for p in (tmp_path / "kbs").iterdir()] == ["kb"]  # no renamed link left beside it
    (tmp_path / "real.txt").write_text("old", encoding="utf8")
    (tmp_path / "linked.txt").symlink_to(tmp_path / "real.txt")
    atomic_write(tmp_path / "linked.txt", lambda tmp: tmp.write_text("new", encoding="utf8"))
    assert (tmp_path / "linked.txt").is_symlink() and (tmp_path / "real.txt").read_text() == "new"
    (tmp_path / "out").symlink_to("/dev/null")
    atomic_write(tmp_path / "out", lambda tmp: tmp.write_text("to the stream", encoding="utf8"))
    assert (tmp_path / "out").is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_checkpoint_resumes_whatever_its_input_paths_spelling(tmp_path, monkeypatch):
    """The same files named ./corpus/x.spacy or by an absolute path from another working folder: before, the
    checkpoint was dropped ("left by a run with other settings"); the inputs' contents are compared instead.
    A [paths] value that is no file (a format name) is still compared as written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "x.spacy").write_bytes(b"corpus")
    (tmp_path / "corpus" / "y.spacy").write_bytes(b"another corpus")
    out = tmp_path / "run"

    def recorded(train, kb_format="mesh"):
        save_run_config({"paths": {"train": train, "kb_format": kb_format}, "training": {"lr": 0.1}}, out)
        return stale_checkpoint(out)

    recorded("corpus/x.spacy")
    start_run(out)
    (out / "last").mkdir()
    assert recorded("./corpus/x.spacy") is None and recorded(str(tmp_path / "corpus" / "x.spacy")) is None
    assert "other settings" in recorded("corpus/x.spacy", kb_format="obo")
    assert "other contents for paths.train" in recorded("corpus/y.spacy")


def test_an_encoder_given_with_a_tilde_is_loaded_from_home(tmp_path, monkeypatch, tiny_encoder_dir, tiny_bert):
    """``--encoder=~/enc`` (no shell expands ~ after =) passed the existence checks, which expand it, and then
    failed to load: a saved encoder was taken for a base model, a base model's path for a hub repo id."""
    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copytree(tiny_encoder_dir, tmp_path / "enc")
    shutil.copytree(tiny_bert, tmp_path / "bert")
    assert BiEncoder.from_pretrained("~/enc").fingerprint() == BiEncoder.from_pretrained(tiny_encoder_dir).fingerprint()
    assert BiEncoder.from_pretrained("~/bert").config.base == "~/bert"


def test_a_pipe_given_as_an_input_file_is_one_line_saying_so(tmp_path):
    """A KB or corpus given as a pipe (/dev/stdin, <(zcat kb.jsonl.gz), a named FIFO): the KB was read twice
    (hashed, then read: "no entities"; a FIFO hung for ever), a corpus called "a folder, not a file"."""
    fifo = tmp_path / "kb.jsonl"
    os.mkfifo(fifo)
    # a writer, so that a command that does read the FIFO gets its data and ends instead of hanging the suite
    def writer():
        while True:  # each read of it gets the data (a daemon: left blocked in open() once no one reads)
            fifo.write_text('{"id": "D1", "name": "aspirin"}\n{"id": "D2", "name": "warfarin"}\n')

    threading.Thread(target=writer, daemon=True).start()
    result = CliRunner().invoke(app, ["build-kb", "--kb", str(fifo), "-o", str(tmp_path / "kb")])
    assert result.exit_code == 2 and "is a pipe or device, not a jsonl KB file" in result.stderr
    result = CliRunner().invoke(app, ["convert", str(fifo), str(tmp_path / "c.spacy")])
    assert result.exit_code == 2 and "is a pipe or device, not a file: save it to a file first" in result.stderr
    (tmp_path / "kb2.jsonl").write_text('{"id": "D1", "name": "aspirin"}\n', encoding="utf8")
    for text, fragment in ((fifo, "is a pipe or device"), (tmp_path, "is a folder, not a file")):  # silver: "not found"
        result = CliRunner().invoke(app, ["silver", str(text), "--kb", str(tmp_path / "kb2.jsonl"), "-o", str(tmp_path / "s.spacy")])
        assert result.exit_code == 2 and fragment in result.stderr, result.output


def test_an_output_in_a_folder_that_cannot_be_written_is_refused_before_linking(tmp_path, monkeypatch):
    """A read-only mount or a folder without permission was found after the whole corpus was linked, naming a
    temporary file (root ignores permissions: the folder is made unwritable through os.access, as a read-only
    mount answers it)."""
    ro = tmp_path / "readonly"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: False if Path(p) == ro else real(p, mode, *a, **k))
    monkeypatch.setattr(visualize_cli, "load_pipeline", lambda *a, **k: pytest.fail("loaded before checking"))
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "meta.json").write_text("{}")
    one_line_error(CliRunner().invoke(visualize_cli.app, [str(corpus(tmp_path)), str(ro / "page.html"), "--kb", str(kb)]),
                   f"{ro} is not writable")


def test_atomic_write_takes_a_path_given_as_a_string(tmp_path):
    """``written_through`` (symlinks followed) called ``is_symlink`` on the argument as given: a ``str`` target
    raised AttributeError."""
    atomic_write(str(tmp_path / "x.txt"), lambda tmp: tmp.write_text("ok", encoding="utf8"))
    assert (tmp_path / "x.txt").read_text() == "ok"
