"""Training commands (session 70): a resumed run continues the one it resumes (random state, hard-negative
index), a longer time budget resumes, an early-stopped run stays ended, shared names are no negatives of
their entities in adapt --objective names, its evaluation keeps the query out of the targets, and a flag
and its --section.key twin given different values are refused."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.kb import Entity
from spacy_pel.models.pair_losses import info_nce_loss, multi_similarity_loss
from spacy_pel.training import loop
from spacy_pel.training.adapt import POOL_FILE, AdaptTask, KBNames, SynonymEvaluator, adapt, nested, split_entities
from spacy_pel.training.adapt_config import AdaptConfig
from spacy_pel.training.config import LoopSettings
from spacy_pel.training.loop import StepOutput, TrainingLoop, checkpoint_to_resume
from spacy_pel.training.retriever import HARD_INDEX_FILE, train
from spacy_pel.training.run_config import save_run_config, stale_checkpoint, start_run
from tests.test_adapt import settings as adapt_settings
from tests.test_adapt import synonym_kb  # noqa: F401 (a fixture)
from tests.test_early_stopping import Linear, Scripted
from tests.test_train import CONFIG, corpus, overrides  # noqa: F401 (corpus: a fixture)


# ------------------------------------------------------------------ bug01: resume = uninterrupted
def trained(out: Path, ov: dict, monkeypatch, kill_after=None, command=None) -> dict:
    """Train into ``out`` (``train``, or ``command(out, ov)``); with ``kill_after``, as if killed right after that
    step's checkpoint, then the same command again. Returns the checkpoint's encoder weights."""
    command = command or (lambda out, ov: train(CONFIG, out, ov, progress=False))
    real = loop.save_checkpoint

    def save_then_die(path, task, opt, state):
        real(path, task, opt, state)
        if state["step"] == kill_after:
            raise KeyboardInterrupt

    monkeypatch.setattr(loop, "save_checkpoint", save_then_die)
    if kill_after:
        with pytest.raises(KeyboardInterrupt):
            command(out, ov)
    command(out, ov)
    monkeypatch.setattr(loop, "save_checkpoint", real)
    last = out / "last" if (out / "last").exists() else out.with_name(out.name + ".work") / "last"
    return {f"{f.name}:{k}": v for f in sorted((last / "encoder").rglob("*.safetensors"))
            for k, v in load_file(str(f)).items()}


@pytest.mark.parametrize("variant", [
    {},  # the frozen tower's sampled negatives (random rows) and the BERT's dropout
    {"training.train_entity_encoder": True, "negatives.hard_fraction": 0.5, "negatives.refresh_every": 4},
])
def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(corpus, kb_dir, tiny_encoder_dir, tmp_path,  # noqa: F811
                                                                     monkeypatch, variant):
    """Defect: the random negatives' generator and torch's (dropout) started afresh on resume, and a trained
    tower's hard-negative index was computed again with the resumed weights: the weights depended on where
    the run was interrupted."""
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"negatives.kind": "sampled", "training.max_steps": 6,
                                                        "training.eval_every": 2, **variant})
    whole = trained(tmp_path / "whole", ov, monkeypatch)
    resumed = trained(tmp_path / "resumed", ov, monkeypatch, kill_after=2)
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    assert (tmp_path / "resumed" / "last" / HARD_INDEX_FILE).exists() == bool(variant)
    log = [json.loads((tmp_path / d / "train_log.json").read_text()) for d in ("whole", "resumed")]
    assert [h["loss"] for h in log[0]["history"]] == [h["loss"] for h in log[1]["history"]]
    assert "random_state" not in log[1]


def test_adapt_names_resumes_with_the_pool_of_its_last_refresh(synonym_kb, tiny_encoder_dir, tmp_path,  # noqa: F811
                                                               monkeypatch):
    """Defect: a resumed adapt --objective names encoded its hard-name pool again with the resumed weights (the
    uninterrupted run searched the pool of its last refresh) and restarted torch's generator (dropout)."""
    ov = adapt_settings(synonym_kb, tiny_encoder_dir, **{"training.max_steps": 6, "training.eval_every": 2,
                                                           "negatives.refresh_every": 3})
    run = lambda out, ov: adapt(None, out, ov, progress=False)  # noqa: E731
    whole = trained(tmp_path / "whole", ov, monkeypatch, command=run)
    resumed = trained(tmp_path / "resumed", ov, monkeypatch, kill_after=4, command=run)
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    assert (tmp_path / "resumed.work" / "last" / POOL_FILE).exists()


class Noisy(Linear):
    """A weight pulled toward dropout-like torch noise and numpy noise: its end depends on both generators."""

    total_steps = 8

    def __init__(self, values=(0.5,), checkpoint=None):
        torch.manual_seed(0)
        self.rng = np.random.default_rng(0)
        self.weight = torch.nn.Parameter(torch.zeros(3))
        if checkpoint is not None:
            self.weight.data = torch.tensor(json.loads((checkpoint / "w.json").read_text()))
        self.evaluator, self.seen = Scripted(values), 0

    def generators(self):
        return {"noise": self.rng}

    def step(self, batch):
        self.seen += 1
        target = torch.rand(3) + torch.from_numpy(self.rng.random(3)).float()
        return StepOutput((self.weight - target).pow(2).sum(), {"loss": 0.0})

    def save(self, folder):
        (folder / "w.json").write_text(json.dumps(self.weight.tolist()))


def loop_run(out, settings, values=(0.5,)):
    checkpoint = checkpoint_to_resume(out)
    task = Noisy(values, checkpoint)
    return task, TrainingLoop(task, settings, out, checkpoint).run(progress=False)


def test_the_loop_restores_the_generators_and_resumes_an_older_checkpoint_without_them(tmp_path, monkeypatch):
    settings = LoopSettings(eval_every=2, schedule="constant")  # the schedule the same for 4 steps and 8
    whole, _ = loop_run(tmp_path / "whole", settings)
    out = tmp_path / "resumed"
    monkeypatch.setattr(Noisy, "total_steps", 4)  # stopped at step 4; then the whole run's 8 steps resumed
    loop_run(out, settings)
    monkeypatch.undo()
    resumed, state = loop_run(out, settings)
    assert resumed.seen == 4 and state["step"] == 8 and torch.equal(whole.weight, resumed.weight)
    # a checkpoint of an earlier version (no random state) still resumes
    old = tmp_path / "old"
    monkeypatch.setattr(Noisy, "total_steps", 4)
    loop_run(old, settings)
    monkeypatch.undo()
    saved = json.loads((old / "last" / loop.STATE_FILE).read_text())
    saved.pop(loop.RANDOM_KEY)
    (old / "last" / loop.STATE_FILE).write_text(json.dumps(saved))
    task, state = loop_run(old, settings)
    assert task.seen == 4 and state["step"] == 8


# ------------------------------------------------------------------ bug02: a longer time budget resumes
def test_a_longer_time_budget_resumes_the_checkpoint(tmp_path):
    """Defect: training.max_minutes was compared as a setting, so a run stopped by its time budget and run
    again with more time started over (its checkpoint deleted), though the budget counts over resumed runs."""
    out = tmp_path / "run"
    raw = {"training": {"max_minutes": 0.5, "lr": 0.001}}
    save_run_config(raw, out)
    start_run(out)
    (out / "last").mkdir()
    save_run_config({"training": {"max_minutes": 2.0, "lr": 0.001}}, out)
    assert stale_checkpoint(out) is None
    save_run_config({"training": {"max_minutes": 2.0, "lr": 0.002}}, out)
    assert "other settings" in stale_checkpoint(out)


# ------------------------------------------------------------------ bug03: an early stop is the end
def test_an_early_stopped_run_stays_ended_when_run_again(tmp_path):
    """Defect: stopped_early was set after the checkpoint was written, so the same command run again resumed
    and trained one more evaluation period each time."""
    out, settings, falling = tmp_path / "run", LoopSettings(eval_every=1, patience=2), (0.9, 0.8, 0.7, 0.6)
    _, first = loop_run(out, settings, falling)
    assert first["stopped_early"] == 3 and first["step"] == 3
    assert json.loads((out / "last" / loop.STATE_FILE).read_text())["stopped_early"] == 3
    for _ in range(2):
        task, again = loop_run(out, settings, falling)
        assert task.seen == 0 and again["step"] == 3 and again["stopped_early"] == 3
        assert [h["step"] for h in again["history"]] == [1, 2, 3]
    # a checkpoint written before stopped_early was recorded there: its history says the run had ended
    saved = json.loads((out / "last" / loop.STATE_FILE).read_text())
    saved.pop("stopped_early")
    (out / "last" / loop.STATE_FILE).write_text(json.dumps(saved))
    task, again = loop_run(out, settings, falling)
    assert task.seen == 0 and again["step"] == 3 and again["stopped_early"] == 3


# ------------------------------------------------------------------ bug04: adapt --objective names, shared names
SHARED_NAMES = [Entity("D11", "seizure", aliases=("fit", "convulsion")), Entity("D12", "aspirin", aliases=("ASA",)),
                Entity("D13", "physical fitness", aliases=("Fit", "fitness"))]


def test_a_name_two_entities_share_is_no_negative_of_either(tiny_encoder_dir, tmp_path):
    """Defect: "fit" of D11 and "Fit" of D13 (one name after normalisation) were each other's negatives, and
    the hard-name miner picked the other entity's copy first: the loss pushed a text away from itself."""
    names = KBNames(SHARED_NAMES)
    fit11, fit13 = names.names.index("fit"), names.names.index("Fit")
    seizure, fitness = names.names.index("seizure"), names.names.index("physical fitness")
    slots = np.array([seizure, fit11, fitness, fit13, names.names.index("aspirin")])
    masked = names.masked_pairs(slots)
    expected = {(0, 3), (1, 2), (1, 3)}  # fit vs Fit; seizure vs D13's Fit; D13's name vs D11's fit
    assert {(i, j) for i, j in zip(*np.nonzero(masked)) if i < j} == expected
    assert names.masked_pairs(np.array([seizure, fitness])) is None

    kb = tmp_path / "kb.jsonl"
    kb.write_text("".join(json.dumps({"id": e.id, "name": e.name, "aliases": list(e.aliases)}) + "\n"
                          for e in SHARED_NAMES), encoding="utf8")
    cfg = AdaptConfig.from_config(nested({"kb.path": str(kb), "encoder.base": str(tiny_encoder_dir),
                                          "training.batch_pairs": 2, "negatives.per_batch": 2}))
    task = AdaptTask(cfg, SHARED_NAMES)
    task.refresh_pool(0)
    seen = {}

    def spy(x, labels, ignore=None):
        seen["labels"], seen["ignore"] = labels, ignore
        return x.sum() * 0.0

    task.loss = spy
    task.step(np.array([[fit11, seizure], [fit13, fitness]]))
    assert seen["ignore"] is not None
    ignore = seen["ignore"].numpy()
    assert ignore[0, 2] and ignore[0, 3] and ignore[1, 2]  # fit/Fit, fit/physical fitness, seizure/Fit
    assert not ignore[0, 1] and not ignore[2, 3]  # an entity's own names stay positives
    # the hard-name miner never picks another entity's copy of the anchor's own name
    anchors = task.embed(np.array([fit11]))
    assert fit13 not in task.hard_slots(anchors, np.array([fit11])).tolist()


def test_pair_losses_leave_masked_pairs_out():
    """Two identical rows of two entities: masked, they neither pull nor push (the loss equals the batch's without
    that pair's negative)."""
    x = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.9, 0.1], [0.0, 1.0]])
    labels = torch.tensor([0, 0, 1, 1])
    ignore = torch.zeros(4, 4, dtype=torch.bool)
    ignore[1, 2] = ignore[2, 1] = True
    for loss in (info_nce_loss, multi_similarity_loss):
        assert loss(x, labels, ignore=ignore) < loss(x, labels)
        assert loss(x, labels, ignore=torch.zeros(4, 4, dtype=torch.bool)) == loss(x, labels)


# ------------------------------------------------------------------ bug05: the query is never a target
def test_the_held_out_evaluation_keeps_the_held_out_entities_other_names_out_of_the_pool():
    """Defect: only the first two names of a held-out entity left the pool, so its 3rd, 4th … names (from which
    the query is drawn) were targets labelled with its own entity: a guaranteed hit for any encoder."""
    entities = [Entity(f"E{i}", f"name{i}", aliases=tuple(f"syn{i}x{k}" for k in range(3))) for i in range(60)]
    names = KBNames(entities)
    _, held = split_entities(names, 1000, seed=0)
    evaluator = SynonymEvaluator(names, np.sort(held), 10000, 25, seed=0)
    first = {names.names[names.first[e]] for e in held}
    held_targets = [t for t, label in zip(evaluator.targets, evaluator.target_labels) if label in set(held.tolist())]
    assert sorted(held_targets) == sorted(first)  # a held-out entity's first name only
    assert not set(evaluator.queries) & set(evaluator.targets)
    assert len(evaluator.targets) == len(held) + 4 * (60 - len(held))  # every other entity's names still there


# ------------------------------------------------------------------ bug06: a flag and its twin
@pytest.mark.parametrize("args, said", [
    (["train-spans", "--epochs", "1", "--training.epochs", "2"], "--epochs 1 and --training.epochs 2"),
    (["train-reranker", "--max-steps", "2", "--training.max_steps", "3"], "--max-steps 2 and --training.max_steps 3"),
    (["train-reranker", "--mention-length", "16", "--model.mention_max_length", "20"],
     "--mention-length 16 and --model.mention_max_length 20"),
])
def test_a_flag_and_its_override_with_other_values_are_refused(tmp_path, args, said):
    """Defect: the --section.key value silently replaced the flag's."""
    result = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "out"), "--encoder", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert f"{said} set the same thing: give one of them" in result.output
    # the same value both ways is one setting: refused for the missing encoder, not for the flags
    agreed = CliRunner().invoke(app, [*args[:4], args[2], "-o", str(tmp_path / "out"), "--encoder", str(tmp_path / "none")])
    assert agreed.exit_code == 2 and "set the same thing" not in agreed.output
