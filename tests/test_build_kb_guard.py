"""build-kb / build-names never silently replace a KB built from other input, and never race (issue 32
item 3); an unreadable --kb is one ``error:`` line and leaves no empty folder behind (item 6)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import spacy_pel.retrieval.build as build
from spacy_pel.cli import app
from spacy_pel.files import InputError, OutputBusyError, output_lock
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.retrieval.names import build_names

from .conftest import KB_LINES

ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_error(result, *fragments):
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def other_kb(tmp_path) -> Path:
    path = tmp_path / "other.jsonl"
    path.write_text("\n".join(KB_LINES[:2]) + "\n", encoding="utf8")
    return path


def ids(kb: Path):
    return list(EntityIndex.from_disk(kb).entities.ids)


def test_a_kb_from_another_file_is_replaced_only_with_force(kb_dir, other_kb, tiny_encoder_dir):
    """Defect: 5 entities silently became 2, exit 0."""
    enc = str(tiny_encoder_dir)
    with pytest.raises(InputError, match="holds a KB built from other input .*KB file content.*--force"):
        build_kb(other_kb, kb_dir, encoder=enc, progress=False)
    assert ids(kb_dir) == ["D1", "D2", "D3", "D4", "D5"]
    result = run("build-kb", "--kb", other_kb, "-o", kb_dir, "--encoder", enc)
    one_line_error(result, str(kb_dir), "--force")
    assert ids(kb_dir) == ["D1", "D2", "D3", "D4", "D5"]
    result = run("build-kb", "--kb", other_kb, "-o", kb_dir, "--encoder", enc, "--force")
    assert result.exit_code == 0, result.output
    assert ids(kb_dir) == ["D1", "D2"]


def test_the_same_input_builds_again(kb_file, kb_dir, tiny_encoder_dir):
    report = build_kb(kb_file, kb_dir, encoder=str(tiny_encoder_dir), progress=False, index="hnsw")
    assert report["entities_total"] == 5 and EntityIndex.from_disk(kb_dir).kind == "hnsw"
    assert (kb_dir / "stamp.json").is_file() and not (kb_dir.parent / "kb.lock").exists()


def test_another_encoder_or_an_added_file_is_refused(kb_file, kb_dir, other_tiny_bert, tiny_encoder_dir, tmp_path):
    with pytest.raises(InputError, match="entity encoder differ"):
        build_kb(kb_file, kb_dir, encoder=str(other_tiny_bert), progress=False)
    extra = tmp_path / "extra.jsonl"
    extra.write_text('{"id": "D9", "name": "heparin"}\n', encoding="utf8")
    build_kb(None, kb_dir, add=extra, progress=False)
    assert ids(kb_dir)[-1] == "D9"
    with pytest.raises(InputError, match="entities added with --add"):  # rebuilding would drop D9
        build_kb(kb_file, kb_dir, encoder=str(tiny_encoder_dir), progress=False)


def test_a_kb_built_before_inputs_were_recorded(kb_dir, kb_file, other_kb, tiny_encoder_dir):
    """A folder without stamp.json: its report's KB file, format and its encoder are compared."""
    (kb_dir / "stamp.json").unlink()
    with pytest.raises(InputError, match="KB file differ"):
        build_kb(other_kb, kb_dir, encoder=str(tiny_encoder_dir), progress=False)
    assert build_kb(kb_file, kb_dir, encoder=str(tiny_encoder_dir), progress=False)["entities_total"] == 5


HOLD = (
    "import sys, time; from spacy_pel.files import output_lock\n"
    "with output_lock(sys.argv[1]):\n"
    "    print('locked', flush=True); time.sleep(120)\n"
)


def test_a_second_concurrent_build_fails_at_once_naming_the_first(kb_file, kb_dir, tiny_encoder_dir, tmp_path):
    out = tmp_path / "kbs" / "kb"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        result = run("build-kb", "--kb", kb_file, "-o", out, "--encoder", tiny_encoder_dir)
        assert time.monotonic() - started < 10  # at once, not after the first build
        one_line_error(result, f"{out} is being built by another process (pid {holder.pid})")
        with pytest.raises(OutputBusyError):
            build_names(kb_dir, out, progress=False)  # build-names takes the same lock
    finally:
        holder.send_signal(signal.SIGKILL)  # killed holding it: the kernel drops the lock
        holder.wait()
        holder.stdout.close()
    assert (out.parent / "kb.lock").exists()  # the stale file of a killed holder does not block
    assert build_kb(kb_file, out, encoder=str(tiny_encoder_dir), progress=False)["entities_total"] == 5
    assert not (out.parent / "kb.lock").exists() and ids(out) == ["D1", "D2", "D3", "D4", "D5"]


def test_the_lock_is_exclusive_in_one_process_too(tmp_path):
    with output_lock(tmp_path / "a" / "kb"):
        with pytest.raises(OutputBusyError, match=f"pid {os.getpid()}"):
            with output_lock(tmp_path / "a" / "kb"):
                pass
    assert not (tmp_path / "a").exists()  # nothing written: the folder made for the lock is gone


def test_build_names_refuses_another_kb_or_input_without_force(kb_dir, tmp_path, kb_file, tiny_encoder_dir):
    out = tmp_path / "names"
    build_names(kb_dir, out, progress=False)
    assert build_names(kb_dir, out, progress=False)["names"] > 5  # the same input: built again
    result = run("build-names", kb_dir, "-o", out, "--input", "name_types")
    one_line_error(result, str(out), "input differ", "--force")
    other = tmp_path / "kb2"
    small = tmp_path / "small.jsonl"
    small.write_text("\n".join(KB_LINES[:3]) + "\n", encoding="utf8")
    build_kb(small, other, encoder=str(tiny_encoder_dir), progress=False)
    with pytest.raises(InputError, match="KB differ"):
        build_names(other, out, progress=False)
    assert build_names(other, out, progress=False, force=True)["entities"] == 3


# ---------------------------------------------------------------------------- item 6: unreadable --kb


@pytest.mark.parametrize("case", ["folder", "missing", "permission", "not utf-8"])
def test_an_unreadable_kb_file_is_one_line_and_leaves_no_folder(case, tmp_path, tiny_encoder_dir, monkeypatch):
    kb = tmp_path / "kb.jsonl"
    expected = {"folder": "is a folder", "missing": "KB file not found", "permission": "Permission denied",
                "not utf-8": "kb.jsonl:1: not UTF-8"}[case]
    if case == "folder":
        kb.mkdir()
    elif case == "permission":  # the tests may run as root, which chmod cannot stop: the read fails instead
        kb.write_text(KB_LINES[0] + "\n", encoding="utf8")

        def denied(*paths):
            raise PermissionError(13, "Permission denied", str(paths[0]))

        monkeypatch.setattr(build, "file_digest", denied)
    elif case == "not utf-8":
        kb.write_bytes(b"\x92\x00garbage\n")
    out = tmp_path / "new" / "kb"
    result = run("build-kb", "--kb", kb, "-o", out, "--encoder", tiny_encoder_dir)
    one_line_error(result, expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["kb.jsonl"] if case != "missing" else [])


def test_an_unreadable_kb_folder_is_one_line(kb_dir, tmp_path):
    """Defect: a KB folder whose meta.json is not JSON was a JSONDecodeError in typer's box."""
    (kb_dir / "meta.json").write_text("{garbage", encoding="utf8")
    one_line_error(run("build-names", kb_dir), str(kb_dir), "meta.json is not readable JSON")
    extra = tmp_path / "extra.jsonl"
    extra.write_text('{"id": "D9", "name": "heparin"}\n', encoding="utf8")
    one_line_error(run("build-kb", "--add", extra, "-o", kb_dir), "meta.json is not readable JSON")
    (kb_dir / "meta.json").write_text(json.dumps([1, 2]), encoding="utf8")
    one_line_error(run("build-names", kb_dir), "not a JSON object")
