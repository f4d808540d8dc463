"""One training loop for every model of the package: the retriever, the joint end-to-end model and
the span scorer are each a :class:`Task` that the loop drives.

A task says what is trained and how: its optimizer (parameter groups with their base learning
rates), its batches, the loss of one batch, its evaluator and the model that evaluator takes, and
what it saves. The loop does the rest, the same way for all of them:

* resume: with ``resume`` and a checkpoint in ``DIR/last`` (:func:`checkpoint_to_resume`; the task
  loads its own weights from there), the optimizer state, the step counter and the random state (torch's
  generator and the task's own, :meth:`Task.generators`) continue from it, so a resumed run ends with the
  weights of one never interrupted; a run that had stopped early stays stopped;
* each step: the task's ``before_step`` hook, the learning rate (``linear``: warm-up over
  ``warmup`` × steps then linear decay to 0; or ``constant``), the loss (under bf16 autocast with
  ``precision = "bf16"``, or ``"auto"`` on a device with bf16 units), backward, gradient clipping at ``grad_clip`` (0 = none), optimizer step;
* every ``eval_every`` steps and at the end: the evaluator's primary metric (``patience`` evaluations
  in a row without a better one end the run: ``stopped_early``); the best model so far
  goes to ``DIR/best`` (with no dev metric -- NaN, e.g. nothing held out to evaluate on -- nothing
  chooses: the latest model is kept there, ``best`` is ``None`` and ``selected`` says so), a
  resumable checkpoint to ``DIR/last`` (weights and optimizer state as safetensors, the rest as JSON), the history to ``DIR/train_log.json`` -- each written atomically;
* a progress bar with the running losses and the best dev metric;
* at the end, the task's ``finish`` hook (e.g. choose the span threshold on the best model).
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from ..evaluation.evaluators import Evaluator
from ..files import InputError, atomic_dir, atomic_write, json_text
from ..models.precision import resolve_precision
from .config import LoopSettings
from .run_config import CHECKPOINT_DIR, checkpoint_files, first_unreadable, stale_checkpoint, start_run

log = logging.getLogger(__name__)
STATE_FILE = "state.json"
RANDOM_KEY = "random_state"  # in STATE_FILE: the generators' states (torch's as a list of bytes, numpy's as JSON)
OPTIMIZER_FILE = "optimizer.safetensors"
NO_DEV_METRIC = "last: no dev metric to choose by"  # state["selected"] when NaN metrics left the choice to the step


def real_number(value: Any) -> bool:
    """A dev metric that can be compared: a number, not ``None`` or NaN."""
    return value is not None and not math.isnan(value)


@dataclass
class StepOutput:
    """A batch's loss to minimise, and the numbers to log (averaged between evaluations)."""

    loss: torch.Tensor
    parts: Dict[str, float] = field(default_factory=dict)


class Task:
    """What the loop trains. Subclasses set ``total_steps``, ``evaluator``, ``device`` and implement
    :meth:`optimizer`, :meth:`batches`, :meth:`step`, :meth:`save` and the :attr:`model` property;
    the other hooks are optional."""

    description = "training"
    loss_parts: Sequence[str] = ("loss",)  # the keys of StepOutput.parts
    total_steps: int = 0
    evaluator: Evaluator
    device: torch.device = torch.device("cpu")

    @property
    def model(self) -> Any:
        """What ``self.evaluator`` is called with."""
        raise NotImplementedError

    def optimizer(self) -> torch.optim.Optimizer:
        raise NotImplementedError

    def batches(self, start: int) -> Iterable[Any]:
        """The batches of steps ``start``, ``start + 1`` … ``total_steps - 1``, in order."""
        raise NotImplementedError

    def step(self, batch: Any) -> StepOutput:
        raise NotImplementedError

    def save(self, folder: Path) -> None:
        """Write the trained model into ``folder`` (``DIR/best`` and snapshots)."""
        raise NotImplementedError

    def save_checkpoint(self, folder: Path) -> None:
        """Write what resuming needs into ``folder`` (``DIR/last``, beside the optimizer state)."""
        self.save(folder)

    def generators(self) -> Dict[str, np.random.Generator]:
        """The task's own numpy generators that the steps draw from (e.g. random negatives), by name: their
        states are checkpointed with torch's and restored on resume."""
        return {}

    def train_mode(self) -> None:
        """Put the modules in training mode (also called after every evaluation)."""

    def start(self, step: int) -> None:
        """Called once before the first step of this run, ``step`` (0, or where it resumes)."""

    def before_step(self, step: int, batch: Any) -> None:
        """Called before step ``step`` (0-based), e.g. to refresh hard negatives."""

    def snapshot(self, done: int) -> Optional[str]:
        """A folder name under ``DIR`` to save the model into after ``done`` steps, or None."""
        return None

    def log_extra(self) -> Dict[str, Any]:
        """More entries for ``train_log.json``."""
        return {}

    def finish(self, output: Path, state: Dict[str, Any]) -> None:
        """Called after the last step (``DIR/best`` exists); may add entries to ``state``."""


class TimeBudget:
    """Minutes of training a task may spend, counted over every run that resumes one output folder
    (``0`` = no limit): the seconds of earlier runs come from the checkpoint's loop state."""

    def __init__(self, minutes: float, checkpoint: Optional[Path] = None):
        self.seconds = float(minutes) * 60
        self.before = 0.0
        if checkpoint is not None:
            self.before = float(json.loads((checkpoint / STATE_FILE).read_text(encoding="utf8")).get("train_seconds", 0.0))
        self.started = time.perf_counter()

    def start(self) -> None:
        """Count from now (call it when the steps begin: loading does not count)."""
        self.started = time.perf_counter()

    def spent(self) -> bool:
        return bool(self.seconds) and self.before + time.perf_counter() - self.started >= self.seconds


# ------------------------------------------------------------------ checkpoints
def checkpoint_to_resume(output: Path, resume: bool = True) -> Optional[Path]:
    """``output/last`` when resuming is asked for and a checkpoint is there, else None; None too for
    one left by a run with other settings or inputs than the run recorded there (:func:`stale_checkpoint`), and
    for one with a file that cannot be read (a power loss: :func:`first_unreadable`), which the run sets aside
    as it starts (:func:`start_run`)."""
    last = Path(output) / CHECKPOINT_DIR
    if not resume or not (last / STATE_FILE).exists() or first_unreadable(checkpoint_files(output)):
        return None
    return None if stale_checkpoint(output) else last


def random_state(task: Task) -> Dict[str, Any]:
    """The state of every generator a step draws from, as JSON: torch's (dropout; CUDA's too on a GPU) and
    the task's own (:meth:`Task.generators`)."""
    out: Dict[str, Any] = {"torch": torch.get_rng_state().tolist(),
                           "task": {name: g.bit_generator.state for name, g in task.generators().items()}}
    if torch.device(task.device).type == "cuda":
        out["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return out


def restore_random_state(task: Task, saved: Dict[str, Any]) -> None:
    """Set the generators to the states :func:`random_state` saved."""
    torch.set_rng_state(torch.tensor(saved["torch"], dtype=torch.uint8))
    if saved.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in saved["cuda"]])
    for name, generator in task.generators().items():
        if name in saved.get("task", {}):
            generator.bit_generator.state = saved["task"][name]


def save_checkpoint(path: Path, task: Task, optimizer: torch.optim.Optimizer, state: dict) -> None:
    with atomic_dir(path) as tmp:
        task.save_checkpoint(tmp)
        opt = optimizer.state_dict()
        tensors = {f"{i}.{k}": v.contiguous() for i, s in opt["state"].items() for k, v in s.items()}
        save_file(tensors, str(tmp / OPTIMIZER_FILE))
        saved = {**state, "param_groups": opt["param_groups"], RANDOM_KEY: random_state(task)}
        (tmp / STATE_FILE).write_text(json_text(saved), encoding="utf8")


def load_checkpoint(path: Path, optimizer: torch.optim.Optimizer, task: Optional[Task] = None) -> dict:
    """Restore ``optimizer`` (and ``task``'s random state, when the checkpoint has it: older ones do not)
    from the checkpoint folder ``path``; returns the saved loop state."""
    state = json.loads((path / STATE_FILE).read_text(encoding="utf8"))
    saved_random = state.pop(RANDOM_KEY, None)
    if task is not None and saved_random is not None:
        restore_random_state(task, saved_random)
    tensors = load_file(str(path / OPTIMIZER_FILE))
    per_param: Dict[int, dict] = {}
    for key, value in tensors.items():
        i, name = key.split(".", 1)
        per_param.setdefault(int(i), {})[name] = value
    try:
        optimizer.load_state_dict({"state": per_param, "param_groups": state.pop("param_groups")})
    except ValueError as err:  # another parameter layout (e.g. a checkpoint from before the entity tower had its own group)
        raise InputError(f"{path}: this checkpoint's optimizer does not fit the model being trained ({err}); start "
                         f"afresh with --training.resume false, or delete {path}") from None
    return state


def linear_schedule(step: int, warm: int, total: int) -> float:
    """Learning-rate factor: linear warm-up over ``warm`` steps, then linear decay to 0 at ``total``."""
    if step < warm:
        return (step + 1) / warm
    return max(0.0, (total - step) / max(1, total - warm))


# ------------------------------------------------------------------ the loop
class TrainingLoop:
    """Train ``task`` as ``settings`` say, writing to ``output``; ``checkpoint`` (from
    :func:`checkpoint_to_resume`) is the folder to resume from, if any."""

    def __init__(self, task: Task, settings: LoopSettings, output: Path, checkpoint: Optional[Path] = None):
        self.task, self.settings, self.output = task, settings, Path(output)
        self.optimizer = task.optimizer()
        self.base_lrs = [float(g["lr"]) for g in self.optimizer.param_groups]
        self.params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.warm = max(1, int(settings.warmup * task.total_steps))
        self.state: Dict[str, Any] = {"step": 0, "best": -1.0, "best_step": 0, "history": [], "train_seconds": 0.0}
        self.resumed = checkpoint is not None
        self.warned_not_finite = False
        if checkpoint is not None:
            self.state.update(load_checkpoint(checkpoint, self.optimizer, task))
        # a best model of an earlier run counts only when this run continues it
        self.has_best = checkpoint is not None and (self.output / "best").exists()

    def lr_factor(self, step: int) -> float:
        if self.settings.schedule == "constant":
            return 1.0
        return linear_schedule(step, self.warm, self.task.total_steps)

    def autocast(self):
        if resolve_precision(self.settings.precision, self.task.device) == "bf16":
            return torch.autocast(self.task.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def run(self, progress: bool = True) -> Dict[str, Any]:
        task, state, total = self.task, self.state, self.task.total_steps
        eval_every, clip = self.settings.eval_every, self.settings.grad_clip
        # the task has read and checked its inputs: a stale checkpoint, or an earlier run's outputs, go now
        start_run(self.output, resumed=self.resumed)
        task.train_mode()
        task.start(state["step"])
        bar = tqdm(total=total, initial=state["step"], desc=task.description, disable=not progress)
        parts: Dict[str, List[float]] = defaultdict(list)
        t0 = time.perf_counter()
        evaluated = state["step"]
        if self.out_of_patience():  # resumed from a run that had stopped early: it ended there
            state.setdefault("stopped_early", state["step"])
        batches = () if state.get("stopped_early") else task.batches(state["step"])
        for step, batch in enumerate(batches, start=state["step"]):
            task.before_step(step, batch)
            for group, lr in zip(self.optimizer.param_groups, self.base_lrs):
                group["lr"] = lr * self.lr_factor(step)
            with self.autocast():
                out = task.step(batch)
            self.optimizer.zero_grad()
            out.loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(self.params, clip)
            self.optimizer.step()
            for key, value in out.parts.items():
                parts[key].append(value)
            state["step"] = done = step + 1
            bar.update(1)
            dev = f"{state['best']:.4g}" if real_number(state["best"]) and state["history"] else "n/a"
            bar.set_postfix({**{k: f"{np.mean(v[-20:]):.4g}" for k, v in parts.items()}, "dev": dev})
            name = task.snapshot(done)
            if name:
                self.save_model(self.output / name)
            if (eval_every and done % eval_every == 0) or done == total:
                means = {k: float(np.mean(parts[k][-eval_every:])) for k in task.loss_parts}
                self.warn_not_finite(means)
                self.evaluate_and_save(means, time.perf_counter() - t0)
                t0, evaluated = time.perf_counter(), done
                if state.get("stopped_early"):
                    break
        bar.close()
        if state["step"] != evaluated:  # the task's batches ended early (a time budget): evaluate where it stopped
            tail = state["step"] - evaluated
            means = {k: float(np.mean(parts[k][-tail:])) for k in task.loss_parts}
            self.warn_not_finite(means)
            self.evaluate_and_save(means, time.perf_counter() - t0)
        elif not self.has_best or self.stale_latest():  # no step ran (e.g. 0 steps): the start (resumed) is the best
            self.evaluate_and_save({k: float("nan") for k in task.loss_parts}, 0.0)
        task.finish(self.output, state)
        self.write_log()
        return state

    def warn_not_finite(self, losses: Dict[str, float]) -> None:
        """Warn, once a run, when a training loss is NaN or infinite (a diverging run, e.g. too high a learning
        rate): the log records it as ``null``, and the run goes on to its end."""
        bad = sorted(k for k, v in losses.items() if not math.isfinite(v))
        if bad and not self.warned_not_finite:
            self.warned_not_finite = True
            log.warning("the training loss (%s) is not finite at step %d: the run diverged (too high a "
                        "learning rate?); train_log.json records it as null", ", ".join(bad), self.state["step"])

    def stale_latest(self) -> bool:
        """No dev metric chose ``DIR/best`` and it is not the model of the last step (a checkpoint of a
        version that kept the first NaN-scored model): the resumed model is evaluated and kept instead."""
        return not real_number(self.state["best"]) and self.state["best_step"] != self.state["step"]

    def out_of_patience(self) -> bool:
        """``patience`` evaluations in a row since the best one, none of them better (early stopping)."""
        evals = [h["step"] for h in self.state["history"]]
        return bool(self.settings.patience) and sum(s > self.state["best_step"] for s in evals) >= self.settings.patience

    def better(self, value: float) -> bool:
        """Whether the model scoring ``value`` replaces ``DIR/best``: a higher dev metric (the first
        one counts); with no dev metric (NaN), the latest model, unless a real one chose ``DIR/best``."""
        best = self.state["best"]
        if not self.has_best or not real_number(best):
            return True
        return real_number(value) and value > best

    def save_model(self, folder: Path) -> None:
        with atomic_dir(folder) as tmp:
            self.task.save(tmp)

    def write_log(self) -> None:
        text = json_text({**self.state, **self.task.log_extra()}, indent=2)
        atomic_write(self.output / "train_log.json", lambda tmp: tmp.write_text(text, encoding="utf8"))

    def evaluate_and_save(self, losses: Dict[str, float], seconds: float) -> None:
        task, state, evaluator = self.task, self.state, self.task.evaluator
        state["train_seconds"] += seconds
        metrics = evaluator(task.model)
        task.train_mode()
        value = evaluator.primary(metrics)
        losses = {k: round(v, 4) for k, v in losses.items()}
        state["history"].append({"step": state["step"], **losses, **evaluator.log(metrics)})
        if self.better(value):
            state["best"], state["best_step"] = (value if real_number(value) else None), state["step"]
            self.save_model(self.output / "best")
            self.has_best = True
            if real_number(value):
                state.pop("selected", None)
            elif state.get("selected") != NO_DEV_METRIC:
                state["selected"] = NO_DEV_METRIC
                log.info("no dev metric (%s is NaN, e.g. nothing held out): the model of the last step is kept as "
                         "the best", evaluator.primary_metric)
        if self.out_of_patience():  # recorded in the checkpoint too: running the command again leaves the run ended
            state["stopped_early"] = state["step"]
        save_checkpoint(self.output / CHECKPOINT_DIR, task, self.optimizer, state)
        self.write_log()
