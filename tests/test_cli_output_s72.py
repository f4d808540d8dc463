"""What the package writes and prints, in scripts and pipelines: strict JSON report files (a diverging run's NaN loss
is ``null``, with a warning), and printing that never crashes under a non-UTF-8 locale."""
import io
import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import spacy
import typer
from spacy.tokens import DocBin, Span

from spacy_pel.cli._errors import cli_errors
from spacy_pel.cli._output import echo_json, library_log_on_stderr
from spacy_pel.evaluation.calibration_record import save_calibrated
from spacy_pel.files import InputError
from spacy_pel.training.config import LoopSettings
from spacy_pel.training.loop import StepOutput, TrainingLoop

from .test_early_stopping import Linear

REPO = Path(__file__).resolve().parents[1]


def strict_load(text: str):
    """``json.loads`` that refuses ``NaN``/``Infinity`` (as JSON.parse, Go and serde do)."""
    def refuse(constant):
        raise ValueError(f"non-strict constant {constant}")
    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------------ bug06: strict JSON in report files
class Diverging(Linear):
    """A task whose logged loss is NaN (as a run with too high a learning rate), its dev score infinite."""
    total_steps = 4

    def __init__(self):
        super().__init__([float("inf")])

    def step(self, batch):
        return StepOutput((self.weight - 1.0).pow(2).sum(), {"loss": float("nan")})

    def log_extra(self):
        return {"extra": [float("-inf"), 1.0]}


def test_a_diverging_run_writes_strict_json_and_warns(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="spacy_pel"):
        state = TrainingLoop(Diverging(), LoopSettings(eval_every=2), tmp_path / "run").run(progress=False)
    assert state["step"] == 4
    log = strict_load((tmp_path / "run" / "train_log.json").read_text(encoding="utf8"))
    assert [h["loss"] for h in log["history"]] == [None, None] and log["extra"] == [None, 1.0]
    assert [h["dev"] for h in log["history"]] == [None, None]
    strict_load((tmp_path / "run" / "last" / "state.json").read_text(encoding="utf8"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "not finite" in r.getMessage()]
    assert len(warnings) == 1 and "loss" in warnings[0]  # once a run, not at every evaluation


def test_a_finite_run_does_not_warn(tmp_path, caplog):
    class Fine(Diverging):
        def step(self, batch):
            return StepOutput((self.weight - 1.0).pow(2).sum(), {"loss": 0.5})

    with caplog.at_level(logging.WARNING, logger="spacy_pel"):
        TrainingLoop(Fine(), LoopSettings(eval_every=2), tmp_path / "run").run(progress=False)
    assert not [r for r in caplog.records if "not finite" in r.getMessage()]


def test_the_calibration_record_is_strict_json(tmp_path):
    save_calibrated(spacy.blank("en"), "pel_linker", None, tmp_path / "out",
                    {"threshold": float("nan"), "ap": float("inf"), "curve": [[0.5, float("nan")]]})
    record = strict_load((tmp_path / "out" / "nil_calibration.json").read_text(encoding="utf8"))
    assert record == {"linker": "pel_linker", "threshold": None, "ap": None, "curve": [[0.5, None]]}


def test_echo_json_stays_strict(capsys):
    echo_json({"f1": float("nan"), "n": (1, math.inf)})
    assert strict_load(capsys.readouterr().out) == {"f1": None, "n": [1, None]}


# ------------------------------------------------------------------ bug02: printing under a non-UTF-8 locale
def test_a_latin1_stdout_escapes_what_it_cannot_encode(monkeypatch):
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="latin-1", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", out)
    with library_log_on_stderr():
        typer.echo("3 docs \u2192 caf\u00e9 \u2014 done")
    assert raw.getvalue().decode("latin-1") == "3 docs \\u2192 caf\u00e9 \\u2014 done\n"
    assert out.errors == "strict"  # as it was, once the command is over


def test_aliases_under_a_latin1_stdout_exits_0(tmp_path):
    nlp = spacy.blank("en")
    doc = nlp("Aspirin caused caf\u00e9-au-lait spots.")
    doc.ents = [Span(doc, 0, 1, label="Chemical", kb_id="D1")]
    DocBin(docs=[doc], store_user_data=True).to_disk(tmp_path / "c.spacy")
    env = {**os.environ, "PYTHONIOENCODING": "latin-1", "PYTHONPATH": str(REPO)}
    env.pop("PYTHONUTF8", None)
    r = subprocess.run([sys.executable, "-m", "spacy_pel", "aliases", str(tmp_path / "c.spacy"), "-o",
                        str(tmp_path / "a.json")], capture_output=True, env=env)
    assert r.returncode == 0, r.stderr.decode("latin-1")[-500:]
    assert b"\\u2192" in r.stdout and json.loads((tmp_path / "a.json").read_text(encoding="utf8"))


# ------------------------------------------------------------------ bug07: NO_COLOR / TERM=dumb on a terminal
class Terminal(io.StringIO):
    def isatty(self):
        return True


def terminal_stderr(monkeypatch, **env) -> "Terminal":
    """A terminal as stderr, with only ``env`` of NO_COLOR and TERM set."""
    for name in ("NO_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    return err


def warning_line(monkeypatch, **env) -> str:
    err = terminal_stderr(monkeypatch, **env)
    with library_log_on_stderr():
        logging.getLogger("spacy_pel.test").warning("starting over")
    return err.getvalue()


def test_warnings_have_no_colour_codes_under_no_color_or_a_dumb_terminal(monkeypatch):
    assert "\x1b[" in warning_line(monkeypatch, TERM="xterm")  # a terminal that shows colours gets them
    assert warning_line(monkeypatch, TERM="xterm", NO_COLOR="1") == "starting over\n"
    assert warning_line(monkeypatch, TERM="dumb") == "starting over\n"


def error_line(monkeypatch, **env) -> str:
    """What a command's expected error prints on a terminal's stderr under ``env``."""
    err = terminal_stderr(monkeypatch, **env)

    @cli_errors
    def command():
        raise InputError("corpus file not found: missing.txt")

    with pytest.raises(typer.Exit):
        command()
    return err.getvalue()


def test_the_error_line_has_no_colour_codes_under_no_color_or_a_dumb_terminal(monkeypatch):
    assert "\x1b[" in error_line(monkeypatch, TERM="xterm")
    assert error_line(monkeypatch, TERM="xterm", NO_COLOR="1") == "error: corpus file not found: missing.txt\n"
    assert error_line(monkeypatch, TERM="dumb") == "error: corpus file not found: missing.txt\n"
