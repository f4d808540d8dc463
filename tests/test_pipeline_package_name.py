"""Every command that takes a saved pipeline takes it as a folder or as the name of an installed pipeline
package (what `spacy package` / `spacy project run package` make), as `spacy.load` does."""
import json
import sys
from pathlib import Path

import pytest
import spacy
from typer.testing import CliRunner

from spacy_pel.cli import evaluate, link
from spacy_pel.cli._errors import pipeline_folder
from tests.test_cli_errors import corpus as gold  # 20 documents of 3 gold mentions

NAME = "en_pel_tinytest"


@pytest.fixture
def installed(tmp_path, kb_dir, monkeypatch):
    """A pipeline package as pip installs one (module + dist-info on sys.path), whose data folder is a saved
    pipeline linking against ``kb_dir``."""
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "precision": "fp32"})
    nlp.meta.update({"name": "pel_tinytest", "version": "0.0.1"})
    site = tmp_path / "site"
    package = site / NAME
    data = package / f"{NAME}-0.0.1"
    data.parent.mkdir(parents=True)
    nlp.to_disk(data)
    (package / "meta.json").write_text(json.dumps(nlp.meta), encoding="utf8")
    (package / "__init__.py").write_text("from spacy.util import load_model_from_init_py\n\n\n"
                                         "def load(**overrides):\n    return load_model_from_init_py(__file__, **overrides)\n")
    info = site / f"{NAME}-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {NAME}\nVersion: 0.0.1\n", encoding="utf8")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.chdir(tmp_path)  # no folder of the package's name here
    yield data
    sys.modules.pop(NAME, None)


def test_a_package_name_is_its_data_folder_and_a_folder_stays_itself(installed, tmp_path):
    assert spacy.load(NAME).has_pipe("pel_linker")  # the fixture is a package spacy.load takes
    assert pipeline_folder(Path(NAME)) == installed
    assert pipeline_folder(tmp_path) == tmp_path
    assert pipeline_folder(Path("no_such_thing")) == Path("no_such_thing")
    assert pipeline_folder(Path("spacy")) == Path("spacy")  # installed, but not a pipeline package


def test_evaluate_and_link_take_an_installed_package(installed, tmp_path):
    corpus = gold(tmp_path)
    by_name, by_folder = tmp_path / "name.json", tmp_path / "folder.json"
    for pipeline, out in ((NAME, by_name), (installed, by_folder)):
        result = CliRunner().invoke(evaluate.app, [str(corpus), "--pipeline", str(pipeline), "--output", str(out)])
        assert result.exit_code == 0, result.output
    scores = [json.loads(p.read_text()) for p in (by_name, by_folder)]
    assert scores[0]["mentions"] == 60 and scores[0]["recall_in_kb"] == scores[1]["recall_in_kb"]
    linked = tmp_path / "linked.jsonl"
    result = CliRunner().invoke(link.app, [str(corpus), str(linked), "--pipeline", NAME])
    assert result.exit_code == 0, result.output
    assert len(linked.read_text().splitlines()) == 20


def test_a_name_that_is_neither_a_folder_nor_a_package_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(evaluate.app, [str(gold(tmp_path)), "--pipeline", "en_pel_missing"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "pipeline not found: en_pel_missing (nor an installed pipeline package's name)" in result.stderr


def test_an_installed_package_is_taken_before_a_folder_of_its_name_here(installed, tmp_path):
    """Defect: a folder of the package's name in the working directory (the one `spacy package` writes, or
    another pipeline) was taken by every --pipeline command, while spacy.load took the installed package."""
    (tmp_path / NAME).mkdir()  # here: not a pipeline
    assert spacy.load(NAME).has_pipe("pel_linker")
    assert pipeline_folder(Path(NAME)) == installed
