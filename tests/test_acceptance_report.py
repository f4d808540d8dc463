"""benchmarks/acceptance.md: issues #28 and #29's acceptance tables, read from the committed reports."""
import importlib.util
import json
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _acceptance():
    spec = importlib.util.spec_from_file_location("acceptance", BENCHMARKS / "acceptance.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_committed_table_matches_its_reports(tmp_path):
    """A source report re-measured (or a row changed) without re-running acceptance.py leaves a stale table."""
    acceptance = _acceptance()
    acceptance.main(output=tmp_path / "acceptance")
    assert (tmp_path / "acceptance.md").read_text() == (BENCHMARKS / "acceptance.md").read_text()
    assert json.loads((tmp_path / "acceptance.json").read_text()) == json.loads((BENCHMARKS / "acceptance.json").read_text())


def test_verdicts(tmp_path, monkeypatch):
    acceptance = _acceptance()
    (tmp_path / "r.json").write_text(json.dumps({"runs": [{"x": 0.95}, {"x": 0.85}]}))
    monkeypatch.setattr(acceptance, "HERE", tmp_path)

    def row(threshold, evidence=""):
        values = acceptance.Source("r", "", lambda report: [(r["x"],) for r in report["runs"]])
        return acceptance.Row(1, "m", "t", lambda v: v[0] >= threshold, (values,), evidence=evidence)

    assert acceptance.measure(row(0.8))["verdict"] == "✔"
    assert acceptance.measure(row(0.9))["verdict"] == "◐"
    assert acceptance.measure(row(0.99))["verdict"] == "✗"
    assert acceptance.measure(row(0.99, evidence="e"))["verdict"] == "✔ by its evidence"
    assert acceptance.measure(row(0.9, evidence="e"))["verdict"] == "◐"
    assert [r["met"] for r in acceptance.measure(row(0.9))["runs"]] == [True, False]
