"""``scripts/fetch_assets.py``: a local copy is copied; a download that cannot happen (no network) is one
error line naming the file and where a copy can go, not a traceback."""
import importlib.util
import urllib.error
from pathlib import Path

import typer
from typer.testing import CliRunner

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fetch_assets.py"


def load():
    spec = importlib.util.spec_from_file_location("fetch_assets", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(module, *args):
    app = typer.Typer()
    app.command()(module.main)
    return CliRunner().invoke(app, list(args))


def test_a_local_copy_is_copied_and_a_failed_download_is_one_line(tmp_path, monkeypatch):
    module = load()
    local = tmp_path / "data"
    (local / "bc5cdr").mkdir(parents=True)
    for name in module.FILES["bc5cdr"]:
        (local / "bc5cdr" / name).write_text(f"{name}\n")
    result = run(module, "--local", str(local), "--assets", str(tmp_path / "assets"), "--data", "bc5cdr")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "assets" / "bc5cdr" / "CDR_TrainingSet.PubTator.txt").read_text() == "CDR_TrainingSet.PubTator.txt\n"

    def offline(*args, **kwargs):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setattr(module.urllib.request, "urlretrieve", offline)
    result = run(module, "--local", str(tmp_path / "none"), "--assets", str(tmp_path / "empty"), "--data", "bc5cdr")
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "could not be downloaded (Name or service not known)" in lines[0], result.output
    assert "CDR_TrainingSet.PubTator.txt" in lines[0] and str(tmp_path / "none" / "bc5cdr") in lines[0]
    assert "Traceback" not in result.output
