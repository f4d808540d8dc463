"""Interrupted writes and damaged resumable state (s74): a KB folder takes its place with its stamp and report in
the one rename; written files and folders are fsync'ed before they are renamed into place and their folder after;
a checkpoint a power loss left unreadable is set aside, named in a warning, and the run starts over."""
import json
import logging
import os
import shutil

import pytest

from spacy_pel import files
from spacy_pel.files import InputError, atomic_dir, atomic_write
from spacy_pel.retrieval.build import STAMP_FILE, build_kb
from spacy_pel.retrieval.index import KeptNames
from spacy_pel.training.adapt import adapt
from spacy_pel.training.retriever import train
from tests.test_adapt import settings as names_settings
from tests.test_adapt import synonym_kb  # noqa: F401 (a fixture)
from tests.test_train import CONFIG, corpus, overrides  # noqa: F401 (corpus: a fixture)


# ---------------------------------------------------------------------------- bug01: the stamp in the KB's rename
def killed_as_the_new_folder_takes_its_place(monkeypatch):
    """Raise (a kill) the moment the new KB folder is renamed into place (the old one's name indexes are
    being set aside): whatever the build writes after that is never written."""

    def killed(self, old):
        raise KeyboardInterrupt

    monkeypatch.setattr(KeptNames, "set_aside", killed)


def test_a_kb_grown_by_add_and_killed_as_it_takes_its_place_keeps_its_stamp(kb_file, tiny_encoder_dir, tmp_path,
                                                                           monkeypatch):
    """Before, stamp.json and build_report.json were written after the grown folder was in place: a kill between
    left a KB without stamp, which forgot it had been extended, and a plain rebuild then replaced it without
    --force, the added entities gone."""
    out = tmp_path / "kb"
    build_kb(kb_file, out, encoder=str(tiny_encoder_dir), progress=False)
    add = tmp_path / "add.jsonl"
    add.write_text(json.dumps({"id": "N1", "name": "new thing", "types": ["Chemical"]}) + "\n", encoding="utf8")
    killed_as_the_new_folder_takes_its_place(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        build_kb(None, out, add=add, progress=False)
    monkeypatch.undo()
    assert "N1" in (out / "entities.jsonl").read_text()  # the grown KB is in place
    stamp = json.loads((out / STAMP_FILE).read_text())
    assert [a["kb"] for a in stamp["added"]] == [str(add)]
    assert json.loads((out / "build_report.json").read_text())["entities_total"] == 6
    with pytest.raises(InputError, match="entities added with --add since"):
        build_kb(kb_file, out, encoder=str(tiny_encoder_dir), progress=False)


def test_a_rebuilt_kb_killed_as_it_takes_its_place_records_its_own_input(kb_file, tiny_encoder_dir, tmp_path,
                                                                         monkeypatch):
    out = tmp_path / "kb"
    build_kb(kb_file, out, encoder=str(tiny_encoder_dir), progress=False)
    other = tmp_path / "other.jsonl"
    other.write_text(kb_file.read_text() + json.dumps({"id": "N1", "name": "new thing"}) + "\n", encoding="utf8")
    killed_as_the_new_folder_takes_its_place(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        build_kb(other, out, encoder=str(tiny_encoder_dir), progress=False, force=True)
    monkeypatch.undo()
    assert json.loads((out / STAMP_FILE).read_text())["input_sha256"] == files.file_digest(other)
    assert json.loads((out / "build_report.json").read_text())["kb"] == str(other)
    for left in tmp_path.glob(".kb.old-*"):  # what the killed process left aside (a new process sweeps it)
        shutil.rmtree(left)
    build_kb(other, out, encoder=str(tiny_encoder_dir), progress=False)  # the same input: no --force needed


# ---------------------------------------------------------------------------- bug02: durable writes
def watch_disk(monkeypatch):
    """Record, in order, each os.fsync (the path of its file or folder) and each os.replace."""
    seen = []
    fsync, replace = os.fsync, os.replace

    def spy_fsync(fd):
        seen.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return fsync(fd)

    def spy_replace(src, dst):
        seen.append(("replace", str(src), str(dst)))
        return replace(src, dst)

    monkeypatch.setattr(os, "fsync", spy_fsync)
    monkeypatch.setattr(os, "replace", spy_replace)
    return seen


def test_atomic_write_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    """Before, nothing was fsync'ed: a power loss after a checkpoint could leave its renamed files zero-length."""
    target = tmp_path / "out" / "x.json"
    seen = watch_disk(monkeypatch)
    atomic_write(target, lambda tmp: tmp.write_text("{}"))
    replaced = next(i for i, e in enumerate(seen) if e[0] == "replace")
    tmp = seen[replaced][1]
    assert ("fsync", tmp) in seen[:replaced]
    assert ("fsync", str(target.parent)) in seen[replaced + 1:]
    assert target.read_text() == "{}"


def test_atomic_dir_fsyncs_its_files_and_folders_before_the_rename_and_the_parent_after(tmp_path, monkeypatch):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old").write_text("old")
    seen = watch_disk(monkeypatch)
    with atomic_dir(target) as tmp:
        (tmp / "a.json").write_text("{}")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "b.bin").write_bytes(b"b")
    into = next(i for i, e in enumerate(seen) if e[0] == "replace" and e[1] == str(tmp))
    before = {e[1] for e in seen[:into] if e[0] == "fsync"}
    assert {str(tmp / "a.json"), str(tmp / "sub" / "b.bin"), str(tmp / "sub"), str(tmp)} <= before
    assert ("fsync", str(tmp_path)) in seen[into + 1:]
    assert sorted(p.name for p in target.iterdir()) == ["a.json", "sub"]


# ---------------------------------------------------------------------------- bug02: damaged checkpoints
DAMAGED = ["last/state.json", "last/optimizer.safetensors", "last/encoder/entity/model.safetensors", "inputs.json"]


def test_a_damaged_checkpoint_is_set_aside_and_the_run_starts_over(corpus, kb_dir, tiny_encoder_dir, tmp_path,  # noqa: F811
                                                                   caplog):
    """Before, a zero-length state.json, optimizer.safetensors or inputs.json (what a power loss leaves of a file
    whose data was not on disk yet) made the same command, which resumes, die with a traceback."""
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 2, "training.eval_every": 2})
    done = tmp_path / "done"
    whole = train(CONFIG, done, ov, progress=False)
    for name in DAMAGED:
        out = tmp_path / name.replace("/", "_")
        shutil.copytree(done, out)
        (out / name).write_bytes(b"")
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            state = train(CONFIG, out, ov, progress=False)
        aside = [p for p in out.iterdir() if p.name.startswith("last.damaged-")]
        assert len(aside) == 1, name
        assert str(out / name) in caplog.text and str(aside[0]) in caplog.text and "starting over" in caplog.text
        assert state["step"] == 2 and state["best"] == whole["best"]  # trained anew, as the uninterrupted run
        assert (out / "last" / "state.json").stat().st_size > 0
        # the checkpoint written now resumes (nothing set aside again)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            train(CONFIG, out, ov, progress=False)
        assert "damaged" not in caplog.text and len(list(out.glob("last.damaged-*"))) == 1


def test_adapt_sets_a_damaged_work_folder_or_checkpoint_aside(synonym_kb, tiny_encoder_dir, tmp_path, caplog):  # noqa: F811
    out = tmp_path / "adapted"
    short = names_settings(synonym_kb, tiny_encoder_dir, **{"training.max_steps": 2, "training.eval_every": 2})
    adapt(None, out, short, progress=False)
    work = tmp_path / "adapted.work"
    (work / "inputs.json").write_bytes(b"")  # adapt's stamp of its work folder
    with caplog.at_level(logging.WARNING):
        assert adapt(None, out, short, progress=False)["step"] == 2
    aside = list(tmp_path.glob("adapted.work.damaged-*"))
    assert len(aside) == 1 and str(work / "inputs.json") in caplog.text and str(aside[0]) in caplog.text
    (work / "last" / "state.json").write_bytes(b"")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert adapt(None, out, short, progress=False)["step"] == 2
    aside = list(work.glob("last.damaged-*"))
    assert len(aside) == 1 and str(work / "last" / "state.json") in caplog.text and "starting over" in caplog.text
