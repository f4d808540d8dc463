"""A resumed training run never mixes stale work with new: a checkpoint left by a run with other
settings is dropped (the run starts over), one left with the same settings (device, resume and eval_every aside) is resumed."""
import logging

import pytest

from spacy_pel.training.joint import JointTask, train_e2e
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
