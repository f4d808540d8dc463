"""The commands in scripts and pipelines: no output over an input, a report kept off a data stream on stdout,
``~`` in every path option, and ``evaluate --e2e`` with ``--threshold`` / ``--train``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.corpora import GOLD_KEY, write_docbin

PUBTATOR = ("1|t|Lithium carbonate and atrial flutter\n1|a|No warfarin.\n1\t0\t17\tLithium carbonate\tChemical\tD1\n"
            "1\t22\t36\tatrial flutter\tDisease\tD3\n\n")


def gold_corpus(path: Path) -> Path:
    nlp = spacy.blank("en")
    doc = nlp("Lithium carbonate and atrial flutter after warfarin")
    doc.spans[GOLD_KEY] = [Span(doc, 0, 2, label="Chemical", kb_id="D1"), Span(doc, 3, 5, label="Disease", kb_id="D3"),
                           Span(doc, 6, 7, label="Chemical", kb_id="D5")]
    write_docbin([doc], path)
    return path


def refused(args) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args])
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]  # warnings of the load aside
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.fixture
def ruler_pipeline(tmp_path, kb_dir) -> Path:
    """A pipeline whose entity_ruler finds two of the gold mentions, then pel_linker links them."""
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns([{"label": "Chemical", "pattern": "warfarin"},
                                               {"label": "Disease", "pattern": "atrial flutter"}])
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    nlp.to_disk(tmp_path / "pipe")
    return tmp_path / "pipe"


@pytest.mark.parametrize("command", [
    ["visualize", "{corpus}", "{corpus}", "--kb", "{kb}"],
    ["evaluate", "{corpus}", "--kb", "{kb}", "--output", "{corpus}"],
    ["evaluate", "{corpus}", "--kb", "{kb}", "--errors", "{corpus}"],
    ["evaluate", "{corpus}", "--kb", "{kb}", "--markdown", "{train}", "--train", "{train}"],
    ["evaluate", "{corpus}", "--kb", "{kb}", "--output", "{out}", "--markdown", "{out}"],
])
def test_an_output_over_an_input_or_another_output_is_refused(tmp_path, kb_dir, command):
    paths = {"corpus": gold_corpus(tmp_path / "c.spacy"), "train": gold_corpus(tmp_path / "t.spacy"), "kb": kb_dir,
             "out": tmp_path / "r.json"}
    before = {p: p.read_bytes() for p in paths.values() if p.is_file()}
    message = refused([str(a).format(**paths) for a in command])
    assert "is one of the inputs" in message or "are the same file" in message, message
    assert {p: p.read_bytes() for p in paths.values() if p.is_file()} == before and not paths["out"].exists()


def run(*args) -> subprocess.CompletedProcess:
    """The command in its own process, stdout a pipe (what /dev/stdout is in ``… | tool``)."""
    return subprocess.run([sys.executable, "-m", "spacy_pel", *map(str, args)], capture_output=True, text=True)


def test_the_report_goes_to_stderr_when_the_output_is_stdout(tmp_path, kb_dir):
    (tmp_path / "c.pubtator").write_text(PUBTATOR, encoding="utf8")
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    nlp.to_disk(tmp_path / "pipe")
    result = run("link", tmp_path / "c.pubtator", "/dev/stdout", "--output-format", "pubtator", "--pipeline",
                 tmp_path / "pipe", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("1|t|") and "{" not in result.stdout  # the documents alone
    assert "\"left_out_by_answer\"" in result.stderr  # the counts, on stderr
    result = run("evaluate", gold_corpus(tmp_path / "g.spacy"), "--kb", kb_dir, "--output", "/dev/stdout")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counts"]["in_kb"] == 3 and "spacy_pel evaluation" in result.stderr


def test_a_tilde_is_home_in_every_path_option(tmp_path, kb_dir, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    gold_corpus(home / "g.spacy")
    result = CliRunner().invoke(app, ["evaluate", "~/g.spacy", f"--kb={kb_dir}", "--output=~/r.json"])
    assert result.exit_code == 0, result.output
    assert json.loads((home / "r.json").read_text())["counts"]["in_kb"] == 3 and not (tmp_path / "~").exists()


def test_evaluate_e2e_applies_threshold_and_refuses_train(tmp_path, ruler_pipeline):
    corpus = gold_corpus(tmp_path / "g.spacy")
    scores = {}
    for extra in ([], ["--threshold", "1.0"]):
        result = CliRunner().invoke(app, ["evaluate", str(corpus), "--pipeline", str(ruler_pipeline), "--e2e",
                                          "--output", str(tmp_path / "r.json"), *extra])
        assert result.exit_code == 0, result.output
        report = json.loads((tmp_path / "r.json").read_text())
        scores[tuple(extra)] = (report["strict"], report["threshold"])
    # the KB's exact names: linked without a threshold; at 1.0 (above a random encoder's cosine), every one NIL
    assert scores[()][0]["f"] > 0 and scores[()][1] == {"pel_linker": None}
    assert scores[("--threshold", "1.0")] == ({"p": None, "r": 0.0, "f": None}, {"pel_linker": 1.0})  # nothing linked: P n/a
    assert "--threshold" in refused(["evaluate", corpus, "--pipeline", ruler_pipeline, "--e2e", "--threshold", "5"])
    assert "--train" in refused(["evaluate", corpus, "--pipeline", ruler_pipeline, "--e2e", "--train", corpus])
