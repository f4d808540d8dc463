"""``retarget`` to a KB grown in place (session 72's probe of the docs taken literally, /tmp/hY bug01): the
pipeline was assembled from ``kbs/my_kb`` and ``build-kb --add`` grew that very folder. ``retarget --kb kbs/my_kb``
must link against the folder as it is now, not the copy saved with the pipeline (same path, older contents)."""
import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli import app

from .test_retarget import saved_pipeline  # noqa: F401 (fixture)

pytestmark = pytest.mark.filterwarnings("ignore:pel_linker. this pipeline has no NIL threshold",
                                        "ignore:pel_linker links against its own copy")


def zorbatinib(nlp):
    doc = nlp.make_doc("Zorbatinib ( ZRB-12 ) was given .")
    doc.ents = [Span(doc, 0, 1, label="Chemical"), Span(doc, 2, 3, label="Chemical")]
    return [e.kb_id_ for e in nlp(doc).ents]


@pytest.mark.parametrize("with_names", [True, False])
def test_retarget_reads_a_kb_grown_in_place_at_the_path_the_pipeline_was_saved_from(saved_pipeline, kb_dir, tmp_path,  # noqa: F811
                                                                                      with_names):
    (tmp_path / "new.jsonl").write_text('{"id": "N1", "name": "zorbatinib", "aliases": ["ZRB-12"], "types": ["Chemical"]}\n',
                                        encoding="utf8")
    runner = CliRunner()
    result = runner.invoke(app, ["build-kb", "--add", str(tmp_path / "new.jsonl"), "--format", "jsonl", "--output", str(kb_dir)])
    assert result.exit_code == 0, result.output
    args = ["retarget", str(saved_pipeline), "--kb", str(kb_dir), "-o", str(tmp_path / "out")]
    if with_names:
        result = runner.invoke(app, ["build-names", str(kb_dir), "--output", str(tmp_path / "grown_names"),
                                     "--reuse", str(tmp_path / "names")])
        assert result.exit_code == 0, result.output
        args += ["--names", str(tmp_path / "grown_names")]
    else:  # the same pipeline without its name-rows rule
        nlp = spacy.load(saved_pipeline)
        nlp.get_pipe("pel_linker").rules.pop("names")
        nlp.config["components"]["pel_linker"]["rules"].pop("names")
        nlp.to_disk(tmp_path / "plain")
        args[1] = str(tmp_path / "plain")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    nlp = spacy.load(tmp_path / "out")
    assert len(nlp.get_pipe("pel_linker").index) == 6  # 5 + the one added in place
    assert zorbatinib(nlp) == ["N1", "N1"]
