"""build-kb / build-names --ray (issue 31), on a local Ray (``ray.init(num_cpus=2)``) with the tiny BERT:
the same KB as a local build; a partial run (a failed chunk, or the driver killed with SIGKILL) resumes
and encodes only the chunks without a marker; a changed input starts over, and a finished KB of other
input is replaced only with force; a chunk that fails is retried, then reported, never left out;
without Ray, one error line.

Only the first test (and those that start no Ray job) run in the quick suite: each Ray job starts its
actors, ~10-20 s on 2 busy cores; the others are marked ``slow``."""
import functools
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spacy_pel.files import InputError
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.chunks import marker_file
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.retrieval.names import NameIndex, build_names
from spacy_pel.retrieval.ray_build import ChunkEncodeError, RayOptions

from .test_build_resume import NAMES, ROOT, interrupt_after, write_kb

ray = pytest.importorskip("ray")
CHUNK = 10  # 60 entities: 6 chunks
RAY_OPTIONS_ALONE = "error: --address, --workers and --cpus-per-worker go with --ray"
# A line Ray's log monitor streams into the driver's stderr from its own processes, e.g.
# "\x1b[36m(pid=gcs_server)\x1b[0m [...] Failed to kill actor ..." (seen in CI after a Ray job in this module)
RAY_STREAMED = re.compile(r"^(\x1b\[[0-9;]*m)?\((pid=|raylet|gcs_server|autoscaler|monitor)")


def cli_error(result) -> str:
    """The CLI's own stderr: without the lines Ray streams from its processes into any stderr of the driver."""
    return "\n".join(line for line in result.stderr.splitlines() if not RAY_STREAMED.match(line)).strip()


@pytest.fixture(scope="module")
def local_ray():
    started = not ray.is_initialized()
    if started:
        os.environ.setdefault("RAY_raylet_start_wait_time_s", "120")  # the default 30 s is too short on busy cores
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def fail_on(entity_id: str, flag: Path, encoder) -> None:
    """Actor setup: encoding a chunk holding ``entity_id`` raises — always, or (``flag`` given) only
    until the first failure has left ``flag`` behind (a passing fault)."""
    original = encoder.encode_entities

    def failing(entities, **kwargs):
        if any(e.id == entity_id for e in entities) and not (flag.name and flag.exists()):
            if flag.name:
                flag.write_text("failed once")
            raise ValueError(f"planted failure on {entity_id}")
        return original(entities, **kwargs)

    encoder.encode_entities = failing


def assert_same(local: Path, other: Path, names: bool = False) -> None:
    """Same ids and rows, vectors within cosine 0.9999, the same fingerprint and meta."""
    if names:
        a, b = NameIndex.from_disk(local), NameIndex.from_disk(other)
        assert a.names == b.names and np.array_equal(a.entity_rows, b.entity_rows)
        va, vb = a.name_vectors(np.arange(len(a))).numpy(), b.name_vectors(np.arange(len(b))).numpy()
    else:
        a, b = EntityIndex.from_disk(local), EntityIndex.from_disk(other)
        assert [e.to_dict() for e in a.entities] == [e.to_dict() for e in b.entities]
        va, vb = np.asarray(a.embeddings, np.float32), np.asarray(b.embeddings, np.float32)
        assert json.loads((local / "stamp.json").read_text()) == json.loads((other / "stamp.json").read_text())
    cos = (va * vb).sum(1) / np.linalg.norm(va, axis=1) / np.linalg.norm(vb, axis=1)
    assert va.shape == vb.shape and cos.min() >= 0.9999, cos.min()
    assert json.loads((local / "meta.json").read_text()) == json.loads((other / "meta.json").read_text())


@pytest.fixture
def kb(tmp_path) -> Path:
    return write_kb(tmp_path / "kb.jsonl", NAMES)


def test_a_ray_build_equals_the_local_build(local_ray, kb, tiny_encoder_dir, tmp_path):
    enc = str(tiny_encoder_dir)
    build_kb(kb, tmp_path / "local", encoder=enc, progress=False, chunk_size=CHUNK)
    report = build_kb(kb, tmp_path / "ray", encoder=enc, progress=False, chunk_size=CHUNK, ray=RayOptions(workers=2))
    assert report["resume"]["ray"]["workers"] == 2 and report["resume"]["ray"]["chunks_encoded"] == 6
    assert_same(tmp_path / "local", tmp_path / "ray")
    assert not (tmp_path / "ray.partial").exists()


@pytest.mark.slow  # a Ray job and a local build: ~12 s
def test_ray_name_rows_equal_the_local_ones(local_ray, kb_dir, tmp_path):
    build_names(kb_dir, tmp_path / "names_local", progress=False, chunk_size=4)
    names = build_names(kb_dir, tmp_path / "names_ray", progress=False, chunk_size=4, ray=RayOptions(workers=1))
    assert names["resume"]["ray"]["chunks_encoded"] == names["resume"]["chunks"] > 1
    assert_same(tmp_path / "names_local", tmp_path / "names_ray", names=True)


@pytest.mark.slow  # two Ray runs and a local build: ~30 s on 2 busy cores
def test_a_failed_chunk_is_retried_reported_and_the_rerun_resumes(local_ray, kb, tiny_encoder_dir, tmp_path):
    enc, out, work = str(tiny_encoder_dir), tmp_path / "kb", tmp_path / "kb.partial"
    always = RayOptions(workers=2, setup=functools.partial(fail_on, "E033", Path("")))
    with pytest.raises(ChunkEncodeError, match=r"1 of 6 chunk\(s\).*chunk 3 \(records 30\.\.39\): failed 2 time\(s\); "
                                               r"last: ValueError: planted failure on E033"):
        build_kb(kb, out, encoder=enc, progress=False, chunk_size=CHUNK, ray=always)
    assert not out.exists()  # no KB without every chunk
    assert [marker_file(work, n).exists() for n in range(6)] == [True, True, True, False, True, True]
    marker_file(work, 1).unlink()  # as if killed between chunk 1's vectors and its marker
    report = build_kb(kb, out, encoder=enc, progress=False, chunk_size=CHUNK, ray=RayOptions(workers=2))
    assert report["resume"]["reused_chunks"] == 4 and report["resume"]["ray"]["chunks_encoded"] == 2
    assert report["resume"]["restarted"] is None and report["entities_encoded"] == 20
    build_kb(kb, tmp_path / "local", encoder=enc, progress=False, chunk_size=CHUNK)
    assert_same(tmp_path / "local", out)


@pytest.mark.slow  # ~10 s
def test_a_passing_fault_is_retried_and_the_build_finishes(local_ray, kb, tiny_encoder_dir, tmp_path):
    flag = tmp_path / "failed_once"
    once = RayOptions(workers=1, setup=functools.partial(fail_on, "E047", flag))
    report = build_kb(kb, tmp_path / "kb", encoder=str(tiny_encoder_dir), progress=False, chunk_size=CHUNK, ray=once)
    assert flag.exists() and report["entities_total"] == 60  # failed once, then encoded
    build_kb(kb, tmp_path / "local", encoder=str(tiny_encoder_dir), progress=False, chunk_size=CHUNK)
    assert_same(tmp_path / "local", tmp_path / "kb")


@pytest.mark.slow  # a Ray job and two local builds: ~18 s
def test_a_changed_input_starts_over(local_ray, kb, tiny_encoder_dir, tmp_path, monkeypatch):
    """A partial build (here a local one, interrupted: both write the same chunks) of another input is
    discarded; the finished KB of that input is then replaced by a build of a third only with force,
    as locally."""
    enc, out = str(tiny_encoder_dir), tmp_path / "kb"
    restore = interrupt_after(monkeypatch, 4)
    with pytest.raises(KeyboardInterrupt):
        build_kb(kb, out, encoder=enc, progress=False, chunk_size=CHUNK)
    restore()
    assert len(list((tmp_path / "kb.partial").glob("chunk_*.done"))) == 3
    write_kb(kb, NAMES[::-1])  # the same ids, the names reordered: no finished chunk may be reused
    report = build_kb(kb, out, encoder=enc, progress=False, chunk_size=CHUNK, ray=RayOptions(workers=2))
    assert "input file content" in report["resume"]["restarted"] and report["resume"]["reused_entities"] == 0
    (tmp_path / "b").mkdir()  # a file of the same name (its name is part of the input's digest)
    build_kb(write_kb(tmp_path / "b" / "kb.jsonl", NAMES[::-1]), tmp_path / "local", encoder=enc, progress=False,
             chunk_size=CHUNK)
    assert_same(tmp_path / "local", out)
    write_kb(kb, NAMES[1:])
    with pytest.raises(InputError, match=r"holds a KB built from other input \(KB file content differ\); use --force"):
        build_kb(kb, out, encoder=enc, progress=False, chunk_size=CHUNK, ray=RayOptions(workers=2))
    assert_same(tmp_path / "local", out)  # untouched


def test_ray_options_go_with_ray_and_ray_missing_is_one_line(kb, kb_dir, tiny_encoder_dir, tmp_path, monkeypatch):
    """No Ray job: the options are checked before anything is read or loaded; Ray that cannot start
    and Ray not installed are one error line each."""
    from spacy_pel.cli import app  # not at the top: the actors import this module for fail_on

    args = ["build-kb", "--kb", str(kb), "-o", str(tmp_path / "ray_kb"), "--encoder", str(tiny_encoder_dir)]
    lone = CliRunner().invoke(app, args + ["--workers", "2"])
    assert lone.exit_code == 2 and cli_error(lone) == RAY_OPTIONS_ALONE
    names = CliRunner().invoke(app, ["build-names", str(kb_dir), "--cpus-per-worker", "2"])
    assert names.exit_code == 2 and cli_error(names) == RAY_OPTIONS_ALONE
    zero = CliRunner().invoke(app, args + ["--ray", "--workers", "0"])
    assert zero.exit_code == 2 and cli_error(zero) == "error: --workers and --cpus-per-worker must be at least 1"
    def no_start(**kwargs):
        raise Exception("The current node timed out during startup.\nmore lines")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_start)  # Ray that cannot start: one line, the work folder kept
    stuck = CliRunner().invoke(app, args + ["--ray"])
    assert stuck.exit_code == 2 and cli_error(stuck) == (
        "error: could not start Ray on this machine: Exception: The current node timed out during startup.; "
        "the finished chunks are kept: run the build again")
    assert (tmp_path / "ray_kb.partial" / "stamp.json").is_file() and not (tmp_path / "ray_kb").exists()
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    monkeypatch.setitem(sys.modules, "ray.data", None)
    missing = CliRunner().invoke(app, args + ["--ray"])
    assert missing.exit_code == 2
    assert cli_error(missing) == 'error: --ray needs Ray: pip install "spacy_pel[ray]" (or "ray[data]" pyarrow)'
    with pytest.raises(InputError, match="needs Ray"):
        build_names(kb_dir, ray=RayOptions())
    assert not (tmp_path / "ray_kb").exists() and not (kb_dir / "names").exists()


@pytest.mark.slow  # a Ray job: ~12 s
def test_the_cli(local_ray, kb, tiny_encoder_dir, tmp_path):
    from spacy_pel.cli import app

    out = tmp_path / "ray_kb"
    args = ["build-kb", "--kb", str(kb), "-o", str(out), "--encoder", str(tiny_encoder_dir), "--chunk-size", "30"]
    result = CliRunner().invoke(app, args + ["--ray", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["resume"]["ray"]["chunks_encoded"] == 2
    names = CliRunner().invoke(app, ["build-names", str(out), "--ray", "--workers", "1", "--chunk-size", "40"])
    assert names.exit_code == 0, names.output
    assert json.loads(names.stdout)["resume"]["ray"]["chunks_encoded"] == 2 and (out / "names" / "meta.json").is_file()


def broken_node(encoder) -> None:
    """Actor setup: the actor cannot start (as when a node lacks the encoder folder)."""
    raise RuntimeError("this node cannot load the encoder")


@pytest.mark.slow  # Ray restarts the actor twice: ~20 s
def test_actors_that_cannot_start_are_reported_not_a_traceback(local_ray, kb, tiny_encoder_dir, tmp_path):
    with pytest.raises(ChunkEncodeError, match=r"6 of 6 chunk\(s\) could not be encoded after retries \(chunks 0, 1, 2, 3, 4, 5: the Ray job failed: "
                                               r"RuntimeError: this node cannot load the encoder\)"):
        build_kb(kb, tmp_path / "kb", encoder=str(tiny_encoder_dir), progress=False, chunk_size=CHUNK,
                 ray=RayOptions(workers=1, setup=broken_node))
    assert not (tmp_path / "kb").exists()


KILLED_BUILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from spacy_pel.retrieval.build import build_kb
    from spacy_pel.retrieval.ray_build import RayOptions

    def slow_down(encoder):  # runs in each actor: a chunk takes a second, so the driver can be killed mid-way
        original = encoder.encode_entities
        def slow(entities, **kwargs):
            time.sleep(1.0)
            return original(entities, **kwargs)
        encoder.encode_entities = slow

    kb, out, enc, address = sys.argv[1:]
    build_kb(Path(kb), Path(out), encoder=enc, progress=False, chunk_size=%d,
             ray=RayOptions(address=address, workers=1, setup=slow_down))
""" % CHUNK)


@pytest.mark.slow  # a driver started, killed, and a second Ray job: ~40 s
def test_a_driver_killed_with_sigkill_resumes(local_ray, kb, tiny_encoder_dir, tmp_path):
    """The driver (a separate process on the test's Ray) is killed after some chunks: the re-run
    encodes only the others, and the KB is the one an uninterrupted build gives."""
    enc, out, work = str(tiny_encoder_dir), tmp_path / "kb", tmp_path / "kb.partial"
    address = ray.get_runtime_context().gcs_address
    proc = subprocess.Popen([sys.executable, "-c", KILLED_BUILD, str(kb), str(out), enc, address], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    try:
        while len(list(work.glob("chunk_*.done"))) < 2:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the Ray build made no progress"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL and not out.exists()
    done = len(list(work.glob("chunk_*.done")))
    assert 2 <= done < 6
    report = build_kb(kb, out, encoder=enc, progress=False, chunk_size=CHUNK, ray=RayOptions(workers=2))
    assert report["resume"]["restarted"] is None and report["resume"]["reused_chunks"] >= done
    assert report["resume"]["ray"]["chunks_encoded"] == 6 - report["resume"]["reused_chunks"]
    build_kb(kb, tmp_path / "local", encoder=enc, progress=False, chunk_size=CHUNK)
    assert_same(tmp_path / "local", out)
