"""Resumable KB builds: a partial build is reused only for the same input, reader settings and
encoder; a build killed with SIGKILL resumes to exactly the clean result."""
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from spacy_pel.models.encoder import BiEncoder
from spacy_pel.retrieval.build import STAMP_FILE, build_kb
from spacy_pel.retrieval.index import EntityIndex

ROOT = Path(__file__).resolve().parents[1]
NAMES = [f"{w} {i}" for i, w in enumerate(["lithium", "aspirin", "warfarin", "delirium", "flutter", "cystitis"] * 10)]


def write_kb(path: Path, names) -> Path:
    lines = [json.dumps({"id": f"E{i:03d}", "name": name, "types": ["Chemical" if i % 2 else "Disease"]})
             for i, name in enumerate(names)]
    path.write_text("\n".join(lines) + "\n", encoding="utf8")
    return path


def assert_same_kb(a: Path, b: Path) -> None:
    left, right = EntityIndex.from_disk(a), EntityIndex.from_disk(b)
    assert [e.to_dict() for e in left.entities] == [e.to_dict() for e in right.entities]
    np.testing.assert_array_equal(left.embeddings, right.embeddings)
    assert json.loads((a / "meta.json").read_text()) == json.loads((b / "meta.json").read_text())


def interrupt_after(monkeypatch, calls: int):
    """Make BiEncoder.encode_entities raise on its ``calls``-th call (once)."""
    original = BiEncoder.encode_entities
    seen = []

    def failing(self, entities, **kw):
        seen.append(len(entities))
        if len(seen) == calls:
            raise KeyboardInterrupt
        return original(self, entities, **kw)

    monkeypatch.setattr(BiEncoder, "encode_entities", failing)
    return lambda: monkeypatch.setattr(BiEncoder, "encode_entities", original)


def test_changed_input_file_starts_clean(tmp_path, tiny_encoder_dir, monkeypatch, caplog):
    """Defect: a build of A, interrupted, then a build of B (same ids, names reordered) to the same
    output reused A's vectors for the chunks A had finished."""
    enc = str(tiny_encoder_dir)
    kb = write_kb(tmp_path / "kb.jsonl", NAMES)
    out = tmp_path / "kb"
    restore = interrupt_after(monkeypatch, 4)
    with pytest.raises(KeyboardInterrupt):
        build_kb(kb, out, encoder=enc, progress=False, chunk_size=10)
    restore()
    assert len(list((tmp_path / "kb.partial").glob("chunk_*.npy"))) == 3
    write_kb(kb, NAMES[::-1])  # file B: the same ids, the names reordered
    with caplog.at_level(logging.WARNING, logger="spacy_pel"):
        report = build_kb(kb, out, encoder=enc, progress=False, chunk_size=10)
    assert report["resume"]["reused_entities"] == 0
    assert "input file content" in report["resume"]["restarted"] and "entity texts" in report["resume"]["restarted"]
    assert "starting a clean build" in caplog.text
    fresh = tmp_path / "fresh"
    build_kb(write_kb(tmp_path / "b.jsonl", NAMES[::-1]), fresh, encoder=enc, progress=False, chunk_size=10)
    assert_same_kb(out, fresh)


def test_same_input_resumes(tmp_path, tiny_encoder_dir, monkeypatch):
    enc = str(tiny_encoder_dir)
    kb = write_kb(tmp_path / "kb.jsonl", NAMES)
    restore = interrupt_after(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        build_kb(kb, tmp_path / "kb", encoder=enc, progress=False, chunk_size=10)
    restore()
    report = build_kb(kb, tmp_path / "kb", encoder=enc, progress=False, chunk_size=10)
    assert report["resume"] == {"reused_entities": 20, "reused_chunks": 2, "chunks": 6, "restarted": None}
    assert report["entities_encoded"] == 40 and not (tmp_path / "kb.partial").exists()
    build_kb(kb, tmp_path / "fresh", encoder=enc, progress=False, chunk_size=10)
    assert_same_kb(tmp_path / "kb", tmp_path / "fresh")


@pytest.mark.parametrize(
    "change, word",
    [
        ({"skip_bad_lines": True}, "reader settings"),
        ({"chunk_size": 20}, "chunk size"),
        ({"encoder": "other"}, "entity encoder"),
        ({"precision": "bf16"}, "precision"),
        ({"stamp": "garbage"}, "no readable stamp.json"),
    ],
)
def test_other_settings_start_clean(tmp_path, tiny_encoder_dir, other_tiny_bert, monkeypatch, change, word):
    kb = write_kb(tmp_path / "kb.jsonl", NAMES[:30])
    restore = interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        build_kb(kb, tmp_path / "kb", encoder=str(tiny_encoder_dir), progress=False, chunk_size=10, precision="fp32")
    restore()
    settings = {"encoder": str(tiny_encoder_dir), "chunk_size": 10, "precision": "fp32", **change}
    if settings["encoder"] == "other":
        settings["encoder"] = str(other_tiny_bert)
    if settings.pop("stamp", None):
        (tmp_path / "kb.partial" / STAMP_FILE).write_text("{not json")
    report = build_kb(kb, tmp_path / "kb", progress=False, **settings)
    assert word in report["resume"]["restarted"] and report["resume"]["reused_entities"] == 0


def test_damaged_chunk_is_encoded_again(tmp_path, tiny_encoder_dir, monkeypatch):
    enc = str(tiny_encoder_dir)
    kb = write_kb(tmp_path / "kb.jsonl", NAMES[:30])
    restore = interrupt_after(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        build_kb(kb, tmp_path / "kb", encoder=enc, progress=False, chunk_size=10)
    restore()
    (tmp_path / "kb.partial" / "chunk_00001.npy").write_bytes(b"\x93NUMPY truncated")
    report = build_kb(kb, tmp_path / "kb", encoder=enc, progress=False, chunk_size=10)
    assert report["resume"]["reused_chunks"] == 1
    build_kb(kb, tmp_path / "fresh", encoder=enc, progress=False, chunk_size=10)
    assert_same_kb(tmp_path / "kb", tmp_path / "fresh")


BUILD_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from spacy_pel.models.encoder import BiEncoder
    from spacy_pel.retrieval.build import build_kb

    original = BiEncoder.encode_entities

    def slow(self, entities, **kw):
        vectors = original(self, entities, **kw)
        time.sleep(0.25)  # killed here, or between chunks, or while a chunk is saved
        return vectors

    BiEncoder.encode_entities = slow
    build_kb(Path(sys.argv[1]), Path(sys.argv[2]), encoder=sys.argv[3], progress=False, chunk_size=4, batch_size=3)
    """
)


def test_kill_9_mid_build_resumes_to_the_clean_result(tmp_path, tiny_encoder_dir):
    enc = str(tiny_encoder_dir)
    kb = write_kb(tmp_path / "kb.jsonl", NAMES[:40])
    out, partial = tmp_path / "kb", tmp_path / "kb.partial"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", BUILD_SCRIPT, str(kb), str(out), enc], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(list(partial.glob("chunk_*.done"))) < 3:  # a chunk is finished once its marker follows its vectors
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the build made no progress"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()
    done = len(list(partial.glob("chunk_*.done")))
    assert 3 <= done < 10 and len(list(partial.glob("chunk_*.npy"))) in (done, done + 1)
    interrupted = tmp_path / "interrupted.partial"
    shutil.copytree(partial, interrupted)

    # the same input: the finished chunks are reused, and the result is the clean build's, bit for bit
    report = build_kb(kb, out, encoder=enc, progress=False, chunk_size=4, batch_size=3)
    assert report["resume"]["restarted"] is None and report["resume"]["reused_entities"] >= 12
    build_kb(kb, tmp_path / "clean", encoder=enc, progress=False, chunk_size=4, batch_size=3)
    assert_same_kb(out, tmp_path / "clean")
    assert not partial.exists()

    # the input file changed since the interruption: the build starts over and gives the new file's KB
    shutil.copytree(interrupted, partial)
    write_kb(kb, NAMES[:40][::-1])  # out holds the KB of the old file now: replacing it needs force
    report = build_kb(kb, out, encoder=enc, progress=False, chunk_size=4, batch_size=3, force=True)
    assert "input file content" in report["resume"]["restarted"] and report["resume"]["reused_entities"] == 0
    build_kb(write_kb(tmp_path / "b.jsonl", NAMES[:40][::-1]), tmp_path / "clean_b", encoder=enc,
             progress=False, chunk_size=4, batch_size=3)
    assert_same_kb(out, tmp_path / "clean_b")


def test_cli_says_when_it_resumes_or_starts_clean(tmp_path, tiny_encoder_dir, monkeypatch):
    from typer.testing import CliRunner

    from spacy_pel.cli.build_kb import app

    kb = write_kb(tmp_path / "kb.jsonl", NAMES[:30])
    args = ["--kb", str(kb), "-o", str(tmp_path / "kb"), "--encoder", str(tiny_encoder_dir), "--chunk-size", "10"]
    restore = interrupt_after(monkeypatch, 2)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 130 and result.stderr.strip().splitlines()[-1] == "interrupted"
    restore()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and "resuming, 10 of 30 entities already encoded" in result.stderr
    assert logging.getLogger("spacy_pel").propagate  # the CLI's log handler is gone again
    restore = interrupt_after(monkeypatch, 2)
    CliRunner().invoke(app, args[:3] + [str(tmp_path / "kb2")] + args[4:])
    restore()
    write_kb(kb, NAMES[:30][::-1])
    result = CliRunner().invoke(app, args[:3] + [str(tmp_path / "kb2")] + args[4:])
    assert result.exit_code == 0
    assert "(changed: input file content, entity texts)" in result.stderr and "starting a clean build" in result.stderr
