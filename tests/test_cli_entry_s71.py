"""Expected errors of the commands are one line and exit 2 on every route: an unknown option among
spaCy-style config overrides, a pipeline without pel_linker."""
import spacy
from typer.testing import CliRunner

from spacy_pel.cli import evaluate, train_reranker
from tests.test_cli_errors import corpus as gold


def test_an_unknown_option_beside_config_overrides_is_one_line():
    """Defect: spaCy's override parser raised click's NoSuchOption, which typer's own click does not catch:
    a typo of a real option (--max-step for --max-steps) was a 45-line traceback, exit 1."""
    result = CliRunner().invoke(train_reranker.app, ["-o", "out", "--max-step", "5"])
    assert result.exit_code == 2, result.output
    assert "No such option '--max-step'" in result.output and "Traceback" not in result.output


def test_a_pipeline_without_pel_linker_is_one_line(tmp_path):
    """Defect: find_linker raised a plain ValueError: evaluate, calibrate, visualize and discover loaded the
    pipeline and ended in a traceback, exit 1 (link and retarget said it in one line)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.to_disk(tmp_path / "pipe")
    result = CliRunner().invoke(evaluate.app, [str(gold(tmp_path)), "--pipeline", str(tmp_path / "pipe")])
    assert result.exit_code == 2, result.output
    assert "the pipeline has no pel_linker" in result.output
