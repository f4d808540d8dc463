"""``retarget``, ``train`` and ``adapt`` refuse an encoder that is a file or a folder holding no model in one
``error:`` line (exit 2), before any work and leaving nothing behind, as build-kb, build-names and evaluate do.

Defect: they loaded it, printed transformers' "Couldn't instantiate the backend tokenizer" traceback (exit 1),
and ``train`` left ``OUTPUT/pending_run.json``, ``adapt`` ``OUTPUT.work/``.
"""
from pathlib import Path

import pytest
import spacy
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.files import InputError
from spacy_pel.pipeline.linker import find_linker
from spacy_pel.pipeline.retarget import retarget
from tests.test_train import corpus  # noqa: F401 (a fixture: the training corpus)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# synonyms for adapt (each entity two names or more), as tests/test_adapt.py's
SYNONYMS = ['{"id": "A%d", "name": "%s", "aliases": ["%s", "%s"]}' % (i, a, b, c) for i, (a, b, c) in enumerate([
    ("aspirin", "acetylsalicylic acid", "ASA"), ("heart failure", "cardiac failure", "HF"),
    ("kidney stone", "renal calculus", "nephrolith"), ("fever", "pyrexia", "febrile"),
    ("hypertension", "high blood pressure", "HBP"), ("anemia", "anaemia", "low hemoglobin")])]


@pytest.fixture(params=["empty folder", "file"])
def no_model(request, tmp_path) -> Path:
    """An ``--encoder`` that exists and holds no model."""
    if request.param == "file":
        path = tmp_path / "encoder.txt"
        path.write_text("not a model", encoding="utf8")
    else:
        path = tmp_path / "empty_encoder"
        path.mkdir()
    return path


def refused(args, encoder: Path) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = [ln for ln in result.stderr.strip().splitlines() if not ln.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(encoder) in lines[0], result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_retarget_refuses_an_encoder_without_a_model(kb_dir, tmp_path, no_model):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    find_linker(nlp)[1].ensure_loaded()
    nlp.to_disk(tmp_path / "pipeline")
    out = tmp_path / "out"
    refused(["retarget", tmp_path / "pipeline", "--kb", kb_dir, "--encoder", no_model, "-o", out], no_model)
    assert not out.exists() and not list(tmp_path.glob(".out*"))
    with pytest.raises(InputError, match="file|neither"):
        retarget(tmp_path / "pipeline", kb_dir, out, encoder=str(no_model))


@pytest.mark.parametrize("where", ["option", "config file"])
def test_train_refuses_an_encoder_base_without_a_model(kb_dir, corpus, tmp_path, no_model, where):  # noqa: F811
    out = tmp_path / "run"
    settings = {"paths.train": corpus, "paths.dev": corpus, "paths.kb": kb_dir, "training.max_steps": 1,
                "training.device": "cpu"}
    config = CONFIGS / "train_pb_random.cfg"
    if where == "option":
        settings["encoder.base"] = no_model
    else:  # the config's own encoder.base
        text = config.read_text(encoding="utf8").replace('base = "all-MiniLM-L6-v2"', f'base = "{no_model}"')
        assert str(no_model) in text
        config = tmp_path / "train.cfg"
        config.write_text(text, encoding="utf8")
    args = ["train", config, "--output", out]
    for key, value in settings.items():
        args += [f"--{key}", value]
    refused(args, no_model)
    assert not out.exists()  # no pending_run.json, no folder made


@pytest.mark.parametrize("objective", ["retriever", "names"])
@pytest.mark.parametrize("where", ["option", "config file"])
def test_adapt_refuses_an_encoder_without_a_model(tmp_path, no_model, objective, where):
    kb = tmp_path / "kb.jsonl"
    kb.write_text("\n".join(SYNONYMS) + "\n", encoding="utf8")
    out = tmp_path / "adapted"
    args = ["adapt", kb, "-o", out, "--objective", objective, "--max-steps", "1"]
    if where == "option":
        args += ["--encoder", no_model]
    else:
        config = CONFIGS / ("adapt_names.cfg" if objective == "names" else "adapt.cfg")
        text = config.read_text(encoding="utf8").replace('base = "all-MiniLM-L6-v2"', f'base = "{no_model}"')
        assert str(no_model) in text
        (tmp_path / "adapt.cfg").write_text(text, encoding="utf8")
        args += ["--config", tmp_path / "adapt.cfg"]
    refused(args, no_model)
    assert not out.exists() and not (tmp_path / "adapted.work").exists()
