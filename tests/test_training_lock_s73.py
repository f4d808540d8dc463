"""Every trainer holds its output's lock for the whole run, as build-kb and build-names do (session 73): a second
run into the same output, started while the first trains (a workflow started twice), is refused at once in one
line naming the holder. Before, it set the first run's last/, best/ and log aside while that run kept writing,
and the folder ended with one run's config beside the other's model."""
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.files import OutputBusyError, output_lock
from spacy_pel.training.adapt import adapt
from spacy_pel.training.config_files import (
    RerankerFile,
    SpanScorerFile,
    read_config,
    train_reranker_from_config,
    train_spans_from_config,
)
from spacy_pel.training.joint import train_e2e, train_e2e_seeds
from spacy_pel.training.retriever import train
from spacy_pel.training.run_config import run_lock
from spacy_pel.training.self_alignment import adapt_retriever

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
# another process holding OUTPUT.lock as files.output_lock holds it (an exclusive flock, its pid inside), without
# importing the package: a few milliseconds, not seconds, to start
HOLD = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1] + '.lock', os.O_RDWR | os.O_CREAT, 0o644)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "os.write(fd, f'{os.getpid()}\\n'.encode())\n"
    "print('locked', flush=True); time.sleep(120)\n"
)


@pytest.fixture
def held(tmp_path):
    """``tmp_path/run/out`` with an earlier run's files in it, its lock held by another process."""
    out = tmp_path / "run" / "out"
    (out / "best").mkdir(parents=True)
    (out / "best" / "model.bin").write_text("the first run's model")
    (out / "config.cfg").write_text("[training]\nseed = 0\n")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield out, holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        holder.stdout.close()


def untouched(out: Path) -> bool:
    return (sorted(p.name for p in out.iterdir()) == ["best", "config.cfg"]
            and (out / "best" / "model.bin").read_text() == "the first run's model")


def trainers(out: Path, tmp_path: Path) -> dict:
    missing = str(tmp_path / "missing")
    reranker = read_config(RerankerFile, CONFIGS / "train_reranker.cfg",
                           {"paths.encoder": missing, "paths.kb": missing, "paths.train": missing})
    spans = read_config(SpanScorerFile, CONFIGS / "train_spans.cfg",
                        {"paths.encoder": missing, "paths.train": missing, "paths.dev": missing})
    return {
        "train": lambda: train(CONFIGS / "train_pb_random.cfg", out, {"paths.kb": missing}, progress=False),
        "train_e2e": lambda: train_e2e(CONFIGS / "train_e2e.cfg", out, {"paths.kb": missing}, progress=False),
        "train_e2e_seeds": lambda: train_e2e_seeds(CONFIGS / "train_e2e.cfg", out, 2, {"paths.kb": missing}, progress=False),
        "train_reranker": lambda: train_reranker_from_config(*reranker, out, progress=False),
        "train_spans": lambda: train_spans_from_config(*spans, out, progress=False),
        "adapt names": lambda: adapt(None, out, {"kb.path": missing, "kb.format": "jsonl"}, progress=False),
        "adapt": lambda: adapt_retriever(CONFIGS / "adapt.cfg", out, {"paths.kb": missing, "paths.kb_format": "jsonl"},
                                         progress=False),
    }


@pytest.mark.parametrize("trainer", ["train", "train_e2e", "train_e2e_seeds", "train_reranker", "train_spans",
                                     "adapt names", "adapt"])
def test_a_second_run_into_a_busy_output_is_refused_at_once(trainer, held, tmp_path):
    out, pid = held
    started = time.monotonic()
    with pytest.raises(OutputBusyError, match=f"{out} is being built by another process \\(pid {pid}\\)"):
        trainers(out, tmp_path)[trainer]()
    assert time.monotonic() - started < 10
    assert untouched(out)  # nothing set aside, no pending run recorded


def test_the_train_command_says_so_in_one_line(held, tiny_encoder_dir):
    out, pid = held
    result = CliRunner().invoke(app, ["train", str(CONFIGS / "train_pb_random.cfg"), "--output", str(out),
                                      "--encoder.base", str(tiny_encoder_dir)])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"error: {out} is being built by another process (pid {pid})"
    assert untouched(out)


def test_the_run_lock_of_a_folder_named_dot_is_beside_it(tmp_path, monkeypatch):
    """``--output .`` has no name to put ``.lock`` after: the lock is the folder's own, by its full path."""
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    with run_lock("."):
        assert (tmp_path / "here.lock").exists()
        with pytest.raises(OutputBusyError):
            with output_lock(tmp_path / "here"):
                pass
    assert not (tmp_path / "here.lock").exists()


def test_an_output_by_a_symlink_and_by_its_real_name_share_one_lock(tmp_path):
    """The lock sat beside the name given, while writes go through the link: two runs wrote one folder (/tmp/hJJ bug02)."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with output_lock(real):
        with pytest.raises(OutputBusyError):
            with output_lock(tmp_path / "link"):
                pass
    with output_lock(tmp_path / "link"):
        with pytest.raises(OutputBusyError):
            with output_lock(real):
                pass
    assert not list(tmp_path.glob("*.lock"))
