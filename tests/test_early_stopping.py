"""``patience``: the training loop stops after that many evaluations in a row without a new best, and
keeps the best model; 0 never stops early."""
import json
from pathlib import Path

import pytest
import torch

from spacy_pel.evaluation.evaluators import Evaluator
from spacy_pel.files import InputError
from spacy_pel.training.config import LoopSettings
from spacy_pel.training.loop import StepOutput, Task, TrainingLoop, checkpoint_to_resume


class Scripted(Evaluator):
    """Dev metric by evaluation: rises to a peak at the 2nd, then falls."""
    primary_metric = "dev"

    def __init__(self, values):
        self.values, self.calls = list(values), 0

    def __call__(self, model):
        value = self.values[min(self.calls, len(self.values) - 1)]
        self.calls += 1
        return {"dev": value}


class Linear(Task):
    total_steps = 20

    def __init__(self, values):
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.evaluator = Scripted(values)
        self.seen = 0

    @property
    def model(self):
        return self.weight

    def optimizer(self):
        return torch.optim.SGD([self.weight], lr=0.1)

    def batches(self, start):
        return range(start, self.total_steps)

    def step(self, batch):
        self.seen += 1
        return StepOutput((self.weight - 1.0).pow(2).sum(), {"loss": 0.0})

    def save(self, folder: Path):
        (folder / "weight.txt").write_text(str(float(self.weight)))


def run(tmp_path: Path, patience: int, values):
    task = Linear(values)
    state = TrainingLoop(task, LoopSettings(eval_every=2, patience=patience), tmp_path / f"p{patience}").run(progress=False)
    return task, state


def test_stops_after_patience_evaluations_without_a_better_one(tmp_path):
    task, state = run(tmp_path, 2, [0.5, 0.9, 0.8, 0.7, 0.95, 0.99])
    # evaluations at steps 2, 4 (best), 6, 8: two in a row below 0.9 -> stop at step 8; 0.95 is never seen
    assert state["step"] == 8 and state["stopped_early"] == 8 and task.seen == 8
    assert state["best_step"] == 4 and state["best"] == 0.9
    assert [h["step"] for h in state["history"]] == [2, 4, 6, 8]


def test_an_improvement_resets_the_count(tmp_path):
    task, state = run(tmp_path, 2, [0.5, 0.9, 0.8, 0.95, 0.9, 0.85, 0.99])
    assert state["best_step"] == 8 and state["stopped_early"] == 12


def test_zero_patience_trains_every_step(tmp_path):
    task, state = run(tmp_path, 0, [0.5, 0.9, 0.8, 0.7, 0.6])
    assert state["step"] == 20 and "stopped_early" not in state and task.seen == 20


class TwoGroups(Linear):
    """The same model, its optimizer in two parameter groups (as the retriever's, once the entity tower has its own)."""

    def __init__(self, values):
        super().__init__(values)
        self.other = torch.nn.Parameter(torch.zeros(1))

    def optimizer(self):
        return torch.optim.SGD([{"params": [self.weight]}, {"params": [self.other], "lr": 0.01}], lr=0.1)


def test_a_checkpoint_of_another_optimizer_layout_is_one_clear_error(tmp_path):
    out = tmp_path / "run"
    TrainingLoop(Linear([0.5]), LoopSettings(eval_every=2), out).run(progress=False)
    with pytest.raises(InputError, match="does not fit the model being trained.*resume false"):
        TrainingLoop(TwoGroups([0.5]), LoopSettings(eval_every=2), out, out / "last")


NAN = float("nan")


def test_no_dev_metric_keeps_the_last_model_and_never_stops_early(tmp_path):
    """A NaN dev metric (nothing to evaluate on) never becomes a "best" score: each evaluation keeps the latest
    model, so the last step's is the one in DIR/best, and patience (which counts from the best) never stops it."""
    task, state = run(tmp_path, 2, [NAN])
    assert state["step"] == 20 and "stopped_early" not in state
    assert state["best"] is None and state["best_step"] == 20 and "no dev metric" in state["selected"]
    assert float((tmp_path / "p2" / "best" / "weight.txt").read_text()) == float(task.weight)


def test_a_real_metric_chooses_over_nan_ones(tmp_path):
    task, state = run(tmp_path, 0, [NAN, 0.5, 0.4, NAN, 0.45])
    assert state["best"] == 0.5 and state["best_step"] == 4 and "selected" not in state
    task, state = run(tmp_path / "later", 0, [0.3, NAN, 0.2])  # a NaN after a real score does not replace it
    assert state["best"] == 0.3 and state["best_step"] == 2


def test_a_resumed_run_without_dev_metric_keeps_its_last_model(tmp_path):
    """A checkpoint whose best is the first NaN-scored model (as an older version kept): resuming it, even
    with no step left to run, evaluates and keeps the last model."""
    out = tmp_path / "run"
    task = Linear([NAN])
    TrainingLoop(task, LoopSettings(eval_every=2), out).run(progress=False)
    state_file = out / "last" / "state.json"
    saved = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**saved, "best": NAN, "best_step": 2}))
    (out / "best" / "weight.txt").write_text("0.0")
    resumed = Linear([NAN])
    with torch.no_grad():  # the task's model as resumed from DIR/last
        resumed.weight.fill_(float((out / "last" / "weight.txt").read_text()))
    state = TrainingLoop(resumed, LoopSettings(eval_every=2), out, checkpoint_to_resume(out)).run(progress=False)
    assert resumed.seen == 0 and state["best_step"] == 20 and state["best"] is None
    assert float((out / "best" / "weight.txt").read_text()) == float(task.weight)
