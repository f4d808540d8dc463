"""A job killed mid-write leaves its hidden scratch copy beside the output (``.NAME.tmp-…``, ``.NAME.old-…``): the
first write into their folder by a process removes those whose process is gone, and keeps a live process's (s72
left alone)."""
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


def test_a_folder_is_listed_once_per_process_and_names_with_glob_characters_are_read(tmp_path, monkeypatch):
    """A folder of many outputs (bulk's shards and markers) is listed at the first write only, not at every write."""
    host, dead = socket.gethostname(), _dead_pid()
    left = tmp_path / f".k[1]*.tmp-{host}-{dead}-a"
    left.mkdir()
    listed = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: listed.append(path) or real(path))
    for n in range(5):
        atomic_write(tmp_path / f"shard{n}.json", lambda p: p.write_text("{}", encoding="utf8"))
    assert not left.exists() and listed.count(tmp_path) == 1  # (rmtree lists the removed folder)


def test_an_old_output_set_aside_by_a_job_killed_between_its_renames_is_put_back(tmp_path):
    host, dead = socket.gethostname(), _dead_pid()
    aside = tmp_path / f".kb.old-{host}-{dead}"
    aside.mkdir()
    (aside / "meta.json").write_text("the old KB", encoding="utf8")
    try:
        with atomic_dir(tmp_path / "kb"):
            raise RuntimeError("killed again")
    except RuntimeError:
        pass
    assert (tmp_path / "kb" / "meta.json").read_text(encoding="utf8") == "the old KB" and not aside.exists()


def test_another_users_scratch_is_theirs_and_a_removal_that_fails_does_not_stop_the_write(tmp_path, monkeypatch):
    """In a shared sticky folder (/tmp) another user's dead scratch cannot be removed: a PermissionError stopped an
    unrelated write (/tmp/hHH bug01). Another user's scratch is left; any removal that fails is skipped."""
    host, dead = socket.gethostname(), _dead_pid()
    theirs = tmp_path / f".x.json.tmp-{host}-{dead}-a"
    theirs.write_text("someone else's", encoding="utf8")
    real_uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real_uid + 1)  # the file is now another user's
    atomic_write(tmp_path / "mine.json", lambda p: p.write_text("{}", encoding="utf8"))
    assert theirs.exists() and (tmp_path / "mine.json").exists()
    monkeypatch.setattr(os, "getuid", lambda: real_uid)
    other = tmp_path / "other"
    other.mkdir()
    stuck = other / f".y.json.tmp-{host}-{dead}-b"
    stuck.write_text("x", encoding="utf8")

    def refuse(self, missing_ok=False):
        raise PermissionError(13, "Operation not permitted", str(self))

    monkeypatch.setattr(type(stuck), "unlink", refuse)
    atomic_write(other / "mine.json", lambda p: p.write_text("{}", encoding="utf8"))
    assert stuck.exists()
