"""A usage error — a mistyped option, a missing required option, a value of the wrong type — is one ``error: …``
line and exit status 2, as every other expected error (docs/cli.md), not typer's five-line usage box; ``--help``
and a command given no arguments still show the help (/tmp/hBB bug08)."""
import subprocess
import sys
from pathlib import Path

import pytest

from spacy_pel.cli import app, run
from spacy_pel.cli.link import app as link_app

ROOT = Path(__file__).resolve().parents[1]


def _run(capsys, target, args):
    with pytest.raises(SystemExit) as stop:
        run(target, args=args)
    out, err = capsys.readouterr()
    return stop.value.code, out, [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize("args, fragment", [
    (["link", "in.txt", "out.jsonl", "--pipline", "p"], "No such option: --pipline"),
    (["link", "in.txt", "out.jsonl"], "Missing option '--pipeline'"),
    (["link", "in.txt", "out.jsonl", "--pipeline", "p", "--batch-size", "ten"], "'--batch-size'"),
    (["no-such-command"], "No such command"),
])
def test_usage_error_is_one_line(capsys, args, fragment):
    code, out, err = _run(capsys, app, args)
    assert code == 2 and out == ""
    assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err


def test_a_command_app_alone_too(capsys):
    code, _, err = _run(capsys, link_app, ["in.txt", "out.jsonl", "--bogus"])
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and "--bogus" in err[0]


def test_help_and_no_arguments_still_show_the_help(capsys):
    code, out, _ = _run(capsys, app, ["--help"])
    assert code == 0 and "link" in out and "build-kb" in out
    code, out, err = _run(capsys, app, [])
    assert code == 2 and "build-kb" in out + "\n".join(err)


def test_an_expected_error_inside_a_command_keeps_its_exit_status(capsys, tmp_path):
    code, _, err = _run(capsys, app, ["split", str(tmp_path / "missing.spacy"), str(tmp_path / "t.spacy"), str(tmp_path / "d.spacy")])
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and "not found" in err[0]


@pytest.mark.parametrize("module", ["spacy_pel", "spacy_pel.train", "spacy_pel.discovery"])
def test_entry_points_use_it(module):
    result = subprocess.run([sys.executable, "-m", module, *(["train"] if module == "spacy_pel" else []),
                             "configs/train_pb_random.cfg", "--bogus-option"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
