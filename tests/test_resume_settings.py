"""A resumed training run never mixes stale work with new: a checkpoint left by a run with other
settings is dropped (the run starts over), one left with the same settings (device, resume and eval_every aside) is resumed."""
import logging

import pytest
import spacy
from spacy.tokens import DocBin
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.training.joint import JointTask, train_e2e
from tests.test_e2e import gold_docs
from tests.test_span_model import corpus, settings  # noqa: F401 (corpus: a fixture)
from tests.test_train_e2e import CONFIG_DEFAULT


def test_a_checkpoint_of_other_settings_is_not_resumed(corpus, kb_dir, tiny_encoder_dir, tmp_path, monkeypatch, caplog):  # noqa: F811
    ov = settings(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 12})
    step, steps = JointTask.step, []

    def counted(self, batch):
        if len(steps) == 7 and stop:
            raise KeyboardInterrupt
        steps.append(1)
        return step(self, batch)

    monkeypatch.setattr(JointTask, "step", counted)
    out = tmp_path / "run"

    def interrupted():
        nonlocal stop
        stop, steps[:] = True, []
        with pytest.raises(KeyboardInterrupt):
            train_e2e(CONFIG_DEFAULT, out, ov, progress=False)  # checkpoint at step 6
        stop, steps[:] = False, []

    stop = True
    interrupted()
    with caplog.at_level(logging.WARNING):
        state = train_e2e(CONFIG_DEFAULT, out, {**ov, "training.lr": 0.001}, progress=False)
    assert len(steps) == 12 and state["step"] == 12  # another learning rate: all 12 steps anew
    assert "starting over" in caplog.text
    interrupted()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        state = train_e2e(CONFIG_DEFAULT, out, {**ov, "training.eval_every": 4}, progress=False)
    assert len(steps) == 6 and state["step"] == 12  # the same settings but when to evaluate: steps 7-12 only
    assert "starting over" not in caplog.text


def test_train_spans_resumes_only_a_checkpoint_of_its_own_settings(tmp_path, tiny_encoder_dir):
    """train-spans --resume (and train-reranker, through the same config saving) after a run with another
    learning rate: its checkpoint is dropped, not continued under the new settings."""
    gold = tmp_path / "gold.spacy"
    DocBin(docs=gold_docs(spacy.blank("en")), store_user_data=True).to_disk(gold)
    out = tmp_path / "spans"
    args = ["train-spans", "-o", str(out), "--encoder", str(tiny_encoder_dir), "--train", str(gold), "--dev", str(gold),
            "--epochs", "2"]
    assert CliRunner().invoke(app, args + ["--lr", "0.05"]).exit_code == 0
    assert (out / "last").is_dir()
    result = CliRunner().invoke(app, args + ["--lr", "0.01", "--resume"])
    assert result.exit_code == 0, result.output
    assert "left by a run with other settings" in result.output  # the CLI's log line
    result = CliRunner().invoke(app, args + ["--lr", "0.01", "--resume"])
    assert result.exit_code == 0 and "other settings" not in result.output  # its own checkpoint: resumed


def test_a_checkpoint_of_other_input_contents_is_not_resumed(tmp_path, tiny_encoder_dir):
    """The same settings and paths, but the training corpus converted again with other contents: the
    checkpoint (trained on the old corpus) is dropped; the next --resume, on the same contents, resumes."""
    gold = tmp_path / "gold.spacy"
    docs = gold_docs(spacy.blank("en"))
    DocBin(docs=docs, store_user_data=True).to_disk(gold)
    out = tmp_path / "spans"
    args = ["train-spans", "-o", str(out), "--encoder", str(tiny_encoder_dir), "--train", str(gold), "--dev", str(gold),
            "--epochs", "2", "--lr", "0.05"]
    assert CliRunner().invoke(app, args).exit_code == 0
    assert (out / "last").is_dir() and "paths.train" in (out / "inputs.json").read_text()
    result = CliRunner().invoke(app, args + ["--resume"])
    assert result.exit_code == 0 and "starting over" not in result.output  # nothing changed: resumed
    DocBin(docs=docs[: len(docs) // 2], store_user_data=True).to_disk(gold)  # the corpus, converted again
    result = CliRunner().invoke(app, args + ["--resume"])
    assert result.exit_code == 0, result.output
    assert "read other contents for paths.dev, paths.train: starting over" in result.output
    result = CliRunner().invoke(app, args + ["--resume"])
    assert result.exit_code == 0 and "starting over" not in result.output
