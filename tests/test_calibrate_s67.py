"""calibrate's output and options are checked before any work, in one line: an output that is a file or a
folder of other things is refused (it was wiped, or the file turned into a pipeline folder), as are a
--max-r1-loss outside [0, 1] (or NaN) and a --plot in a format matplotlib does not write (refused after the
pipeline was written); what the corpus leaves nothing to calibrate on is an InputError (one line), not a
traceback."""
import numpy as np
import pytest
import spacy
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.corpora import write_docbin
from spacy_pel.evaluation.nil import calibrate, nil_curve, strict_curve
from spacy_pel.files import InputError
from tests.test_cli_errors import one_line_error

from .test_evaluate import gold_doc


def run(*args):
    return CliRunner().invoke(app, ["calibrate", *map(str, args)])


@pytest.fixture
def pipe_and_corpus(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    nlp.to_disk(tmp_path / "pipe")
    write_docbin([gold_doc(nlp, [(0, 2, "D1"), (4, 6, "NIL"), (7, 9, "D3")])], tmp_path / "dev.spacy")
    return tmp_path / "pipe", tmp_path / "dev.spacy"


def hidden(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_an_output_that_is_not_a_pipeline_is_refused_not_replaced(pipe_and_corpus, tmp_path):
    pipe, dev = pipe_and_corpus
    mine = tmp_path / "mywork"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes", encoding="utf8")
    one_line_error(run(pipe, dev, "-o", mine), f"output {mine} is a folder that is not a pipeline; refusing to replace it")
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    report = tmp_path / "report.txt"
    report.write_text("important", encoding="utf8")
    one_line_error(run(pipe, dev, "-o", report), f"output {report} is a file")
    assert report.read_text(encoding="utf8") == "important" and hidden(tmp_path) == []
    with pytest.raises(InputError, match="not a pipeline"):
        calibrate(pipe, dev, mine)
    # an empty folder, an earlier calibration and the pipeline's own folder are written to
    (mine / "notes.txt").unlink()
    for output in (mine, mine, pipe):
        result = run(pipe, dev, "-o", output)
        assert result.exit_code == 0, result.output
        assert (output / "nil_calibration.json").is_file()


@pytest.mark.parametrize("args, fragment", [
    (["--max-r1-loss", "-1"], "--max-r1-loss must be a share within [0, 1], not -1.0"),
    (["--max-r1-loss", "nan"], "--max-r1-loss must be a share within [0, 1], not nan"),
    (["--max-r1-loss", "1.5"], "--max-r1-loss must be a share within [0, 1], not 1.5"),
    (["--plot", "p.txt"], "--plot p.txt: give a file name ending in one of"),
    (["--plot", "curve"], "--plot curve: give a file name ending in one of"),
])
def test_bad_options_are_refused_before_any_work(pipe_and_corpus, tmp_path, monkeypatch, args, fragment):
    pipe, dev = pipe_and_corpus
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(spacy, "load", lambda *a, **k: pytest.fail("loaded before checking"))
    one_line_error(run(pipe, dev, "-o", tmp_path / "out", *args), fragment)
    assert not (tmp_path / "out").exists()


def test_a_plot_in_any_format_matplotlib_writes(pipe_and_corpus, tmp_path):
    pipe, dev = pipe_and_corpus
    result = run(pipe, dev, "-o", tmp_path / "out", "--plot", tmp_path / "curve.SVG", "--max-r1-loss", "1")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "curve.SVG").read_text(encoding="utf8").lstrip().startswith("<?xml")


def test_e2e_on_a_corpus_where_nothing_is_found_is_one_line(kb_dir, tmp_path):
    with_ner = spacy.blank("en")
    with_ner.add_pipe("entity_ruler").add_patterns([{"label": "Chemical", "pattern": "Lithium carbonate"}])
    with_ner.add_pipe("pel_linker", config={"kb": str(kb_dir), "threshold": 0.5})  # (none: a warning line)
    with_ner.to_disk(tmp_path / "with_ner")
    write_docbin([], tmp_path / "empty.spacy")
    one_line_error(run(tmp_path / "with_ner", tmp_path / "empty.spacy", "--e2e", "-o", tmp_path / "out"),
                   "the pipeline found no linked span in the corpus")
    assert not (tmp_path / "out").exists()


def test_the_curves_input_problems_are_input_errors():
    with pytest.raises(InputError, match="no gold NIL"):
        nil_curve(np.array([0.2, 0.8]), np.zeros(2, bool))
    # the lowest-confidence mention linked right: every cut loses it, so no threshold (nothing NIL), with a note
    assert nil_curve(np.array([0.1, 0.5]), np.array([False, True]), np.array([True, False]), 0.0)["threshold"] is None
    with pytest.raises(InputError):  # a bound no loss can meet
        nil_curve(np.array([0.1, 0.5]), np.array([False, True]), np.array([True, False]), -1.0)
    with pytest.raises(InputError, match="found no linked span"):
        strict_curve(np.zeros(0), np.zeros(0, bool), 3)
