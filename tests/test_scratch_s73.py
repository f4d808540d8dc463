"""A job killed mid-write leaves its hidden scratch copy beside the output (``.NAME.tmp-…``, ``.NAME.old-…``): the
next write of the same output removes those whose process is gone, and keeps a live process's (s72 left alone)."""
import os
import socket
import subprocess
import sys

from spacy_pel.files import atomic_dir, atomic_write


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_jobs_scratch_is_swept_and_a_live_ones_kept(tmp_path):
    host, dead, live = socket.gethostname(), _dead_pid(), os.getppid()
    left = [tmp_path / f".kb.tmp-{host}-{dead}-abc", tmp_path / f".kb.old-{host}-{dead}"]
    for folder in left:
        folder.mkdir()
        (folder / "embeddings.npy").write_bytes(b"x" * 1000)
    (tmp_path / f".meta.json.tmp-{host}-{dead}-xyz").write_text("half", encoding="utf8")
    kept = [tmp_path / f".kb.tmp-{host}-{live}-abc", tmp_path / f".kb.tmp-otherhost-{dead}-abc",
            tmp_path / ".kb.tmp-abc"]  # a live process's, another host's, an older version's (no owner named)
    for folder in kept:
        folder.mkdir()
    with atomic_dir(tmp_path / "kb") as out:
        (out / "meta.json").write_text("{}", encoding="utf8")
    atomic_write(tmp_path / "meta.json", lambda p: p.write_text("{}", encoding="utf8"))
    assert (tmp_path / "kb" / "meta.json").exists() and (tmp_path / "meta.json").exists()
    assert not any(p.exists() for p in left) and not (tmp_path / f".meta.json.tmp-{host}-{dead}-xyz").exists()
    assert all(p.exists() for p in kept)
    # this process's own scratch names follow the pattern the sweep reads
    with atomic_dir(tmp_path / "kb") as out:
        assert out.name.startswith(f".kb.tmp-{host}-{os.getpid()}-")


def test_a_name_with_glob_characters_sweeps_only_its_own(tmp_path):
    host, dead = socket.gethostname(), _dead_pid()
    mine, other = tmp_path / f".k[1].tmp-{host}-{dead}-a", tmp_path / f".k1.tmp-{host}-{dead}-a"
    mine.mkdir()
    other.mkdir()
    with atomic_dir(tmp_path / "k[1]") as out:
        (out / "x").write_text("x", encoding="utf8")
    assert not mine.exists() and other.exists()


def test_an_old_output_set_aside_by_a_job_killed_between_its_renames_is_put_back(tmp_path):
    host, dead = socket.gethostname(), _dead_pid()
    aside = tmp_path / f".kb.old-{host}-{dead}"
    aside.mkdir()
    (aside / "meta.json").write_text("the old KB", encoding="utf8")
    atomic_write(tmp_path / "kb.json", lambda p: p.write_text("{}", encoding="utf8"))  # another output's write
    assert aside.exists()
    try:
        with atomic_dir(tmp_path / "kb"):
            raise RuntimeError("killed again")
    except RuntimeError:
        pass
    assert (tmp_path / "kb" / "meta.json").read_text(encoding="utf8") == "the old KB" and not aside.exists()
