import json
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch
from safetensors.torch import load_file, save_file
from spacy.tokens import Span

from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.evaluation.evaluators import Evaluator
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.negatives import HardNegativeMiner
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.config import (
    ConfigError,
    JointConfig,
    LoopSettings,
    RetrieverConfig,
)
from spacy_pel.training.loop import StepOutput, Task, TrainingLoop, checkpoint_to_resume
from spacy_pel.training.retriever import Batch, RetrieverTask, train
from spacy_pel.training.run_config import load_config

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "train_pb_random.cfg"
E2E_CONFIG = CONFIG.parent / "train_e2e.cfg"
SENTS = [
    ("Lithium carbonate toxicity was seen.", 0, 2, "D1"),
    ("The newborn had tricuspid regurgitation today.", 3, 5, "D2"),
    ("Then atrial flutter began.", 1, 3, "D3"),
    ("Aspirin was given.", 0, 1, "D4"),
    ("Warfarin was stopped.", 0, 1, "D5|D4"),
    ("Bevacizumab caused harm.", 0, 1, "NIL"),
]


@pytest.fixture
def corpus(tmp_path):
    nlp = spacy.blank("en")
    docs = []
    for text, a, b, kb_id in SENTS:
        doc = nlp.make_doc(text)
        doc.spans[GOLD_KEY] = [Span(doc, a, b, label="X", kb_id=kb_id)]
        doc.ents = list(doc.spans[GOLD_KEY])
        docs.append(doc)
    write_docbin(docs, tmp_path / "train.spacy")
    return tmp_path / "train.spacy"


def overrides(corpus, kb_dir, tiny_encoder_dir, **extra):
    base = {
        "paths.train": str(corpus),
        "paths.dev": str(corpus),
        "paths.kb": str(kb_dir),
        "encoder.base": str(tiny_encoder_dir),
        "negatives.count": 3,
        "training.batch_size": 4,
        "training.lr": 0.003,
        "training.warmup": 0.1,
        "training.eval_every": 5,
        "training.eval_docs": 0,
        "training.device": "cpu",
    }
    base.update(extra)
    return base


def config(ov) -> RetrieverConfig:
    return RetrieverConfig.from_config(load_config(CONFIG, ov))


def make_task(ov, output=None) -> RetrieverTask:
    cfg = config(ov)
    return RetrieverTask(cfg, checkpoint_to_resume(output, cfg.training.resume) if output else None)


def all_mentions(task) -> Batch:
    examples = task.stages[-1].examples
    return Batch("mentions", np.arange(len(examples)), examples)


def batch_loss(task):
    torch.manual_seed(0)
    task.encoder.eval()
    with torch.no_grad():
        task.linking.miner = HardNegativeMiner(task.miner.k, 0.0, seed=1, n_entities=len(task.index))
        return float(task.step(all_mentions(task)).loss)


def test_training_lowers_loss_and_resumes(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    out = tmp_path / "run"
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 10})
    before = batch_loss(make_task(ov))
    state = train(CONFIG, out, ov, progress=False)
    assert state["step"] == 10 and [h["step"] for h in state["history"]] == [5, 10]
    log = json.loads((out / "train_log.json").read_text())
    assert log["skipped_train_mentions"] == {"nil": 1, "absent": 0}
    assert log["best"] == max(h["dev_r1"] for h in log["history"]) == pytest.approx(state["best"], abs=1e-4)
    trained = make_task(ov, out)  # resumes from out/last
    loop = TrainingLoop(trained, config(ov).training, out, checkpoint_to_resume(out))
    assert loop.state["step"] == 10
    assert batch_loss(trained) < before
    # the entity tower was frozen: the KB built with the base encoder still fits the trained one
    best = BiEncoder.from_pretrained(out / "best")
    EntityIndex.from_disk(kb_dir).check_encoder(best)
    # a longer run continues from step 10 instead of starting over
    state = train(CONFIG, out, {**ov, "training.max_steps": 15}, progress=False)
    assert [h["step"] for h in state["history"]] == [5, 10, 15]


def test_trained_entity_tower_with_fgsm_and_hard_negatives(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    ov = overrides(
        corpus,
        kb_dir,
        tiny_encoder_dir,
        **{
            "training.max_steps": 4,
            "training.train_entity_encoder": True,
            "training.eval_kb_sample": 2,
            "negatives.hard_fraction": 0.5,
            "negatives.count": 2,
            "negatives.refresh_every": 2,
            "fgsm.enabled": True,
            "loss.name": "ce",
        },
    )
    state = train(CONFIG, tmp_path / "run", ov, progress=False)
    assert state["step"] == 4 and np.isfinite(state["history"][-1]["loss"])
    best = BiEncoder.from_pretrained(tmp_path / "run" / "best")
    assert best.config.similarity == "dot"
    with pytest.raises(ValueError, match="built with entity encoder"):
        EntityIndex.from_disk(kb_dir).check_encoder(best)  # entity weights changed: rebuild the KB


def test_synonym_prealignment_alone(kb_dir, tiny_encoder_dir, tmp_path, corpus):
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"paths.train": None, "synonyms.steps": 3})
    task = make_task(ov)
    (stage,) = task.stages
    assert stage.name == "synonyms" and stage.steps == 3 and len(stage.examples) == 3  # Li2CO3, flutter, acetylsalicylic acid
    assert TrainingLoop(task, config(ov).training, tmp_path / "run").run(progress=False)["step"] == 3


def test_arborescence_objective_runs_and_uses_coreferent_mentions(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 4, "training.objective": "arborescence",
                                                       "arborescence.refresh_every": 2, "negatives.count": 4})
    task = make_task(ov)
    arbo = task.arborescence.targets
    assert {int(k): len(v) for k, v in arbo.members.items()} == {0: 1, 1: 1, 2: 1, 3: 2}
    state = TrainingLoop(task, config(ov).training, tmp_path / "run").run(progress=False)
    assert state["step"] == 4 and np.isfinite(state["history"][-1]["loss"])
    # negatives never include a coreferent mention (same gold entity)
    rows, real = arbo.negatives(arbo.vectors, np.arange(len(arbo.entity)), 2)
    for i, (r, ok) in enumerate(zip(rows, real)):
        assert all(arbo.entity[j] != arbo.entity[i] for j, o in zip(r, ok) if o)
    with pytest.raises(ValueError, match="arborescence objective needs"):
        make_task({**ov, "paths.train": None, "synonyms.steps": 2})


@pytest.mark.parametrize("loss", ["ce", "proxy"])
def test_whole_kb_negatives_equal_every_non_gold_row_as_sampled_negative(corpus, kb_dir, tiny_encoder_dir, tmp_path, loss):
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"negatives.kind": "kb", "loss.name": loss})
    task = make_task(ov)
    task.encoder.eval()
    batch = all_mentions(task).examples
    with torch.no_grad():
        got = float(task.step(all_mentions(task)).loss)
        m = task.encoder.embed_mentions(batch.inputs, normalize=task.normalize_mentions)
        n = len(task.index)
        rows = np.array([[r for r in range(n)] for _ in batch.gold])
        mask = torch.tensor([[r not in g for r in range(n)] for g in batch.gold])
        pos = task.table[[min(g) for g in batch.gold]]
        want = float(task.loss(m, pos, task.table[torch.from_numpy(rows)], mask))
    assert got == pytest.approx(want, rel=1e-5)
    # (the mask above drops every gold row, composite partners included: D4 for "D5|D4")
    state = train(CONFIG, tmp_path / "run", {**ov, "training.max_steps": 4}, progress=False)
    assert state["step"] == 4


def test_in_batch_negatives_survive_a_batch_of_one(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    # 5 training mentions in batches of 4: the second step's batch has one mention and no negative
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"negatives.kind": "in_batch", "loss.name": "ce", "training.max_steps": 2})
    state = train(CONFIG, tmp_path / "run", ov, progress=False)
    assert state["step"] == 2 and np.isfinite(state["history"][-1]["loss"])


def test_config_errors_name_the_section_and_key(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    ov = overrides(corpus, kb_dir, tiny_encoder_dir)
    cases = [
        ({"training.max_step": 3}, r"\[training\]: unknown key\(s\) \['max_step'\]"),
        ({"training.max_steps": "ten"}, r"\[training\] max_steps: expected an integer, got 'ten'"),
        ({"training.train_entity_encoder": "yes"}, r"train_entity_encoder: expected true or false"),
        ({"negatives.hard_fraction": 1.5}, r"\[negatives\] hard_fraction: must be within \[0, 1\]"),
        ({"negatives.kind": "random"}, r"\[negatives\] kind: must be one of 'sampled', 'in_batch', 'kb'"),
        ({"loss.name": "triplet"}, r"\[loss\] name: must be one of 'ce', 'ce_cosine', 'proxy'"),
        ({"loss.alpah": 3.0}, r"\[loss\]: unknown key\(s\) \['alpah'\]"),
        ({"encoder.pooling": "cls"}, r"\[encoder\]: unknown key\(s\) \['pooling'\]"),
        ({"training.precision": "fp16"}, r"\[training\] precision: must be one of 'fp32', 'bf16'"),
        ({"training.eval_every": 0}, r"eval_every: must be at least 1"),
        ({"negatives.kind": "kb", "training.train_entity_encoder": True}, "frozen entity tower"),
    ]
    for extra, message in cases:
        with pytest.raises(ConfigError, match=message):
            train(CONFIG, tmp_path / "bad", {**ov, **extra}, progress=False)
    assert not (tmp_path / "bad").exists()  # a bad config is refused before anything is written
    # settings of the losses not chosen are accepted (one file serves every loss) and ignored
    cfg = config({**ov, "loss.name": "ce", "loss.alpha": 5.0})
    assert cfg.loss.build().settings == {} and cfg.training.max_steps == 0 and cfg.training.epochs == 1.0
    with pytest.raises(ConfigError, match=r"unknown section\(s\) \['fgsm'\]"):
        JointConfig.from_config({**load_config(E2E_CONFIG), "fgsm": {"enabled": True}})
    with pytest.raises(ConfigError, match=r"\[negatives\] kind: must be one of 'sampled', 'kb'"):
        JointConfig.from_config(load_config(E2E_CONFIG, {"negatives.kind": "in_batch"}))


def test_train_cli_takes_config_overrides(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    from typer.testing import CliRunner

    from spacy_pel.cli.train import app

    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 2, "loss.name": "ce"})
    args = [str(CONFIG), "--output", str(tmp_path / "cli")]
    for key, value in ov.items():
        args += [f"--{key}", str(value)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output[result.output.index("{"):])["step"] == 2
    assert (tmp_path / "cli" / "best").is_dir()
    bad = CliRunner().invoke(app, [*args, "--training.batch_size", "0"])
    assert bad.exit_code == 2 and "error:" in bad.output and "batch_size" in bad.output


def test_stage_snapshot_after_prealignment_and_bf16_training(kb_dir, tiny_encoder_dir, tmp_path, corpus):
    """Both stages run; the encoder at the end of synonym pre-alignment is kept as after_synonyms/,
    and bf16 autocast training gives a finite loss."""
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"synonyms.steps": 2, "training.max_steps": 3,
                                                       "training.precision": "bf16", "training.eval_every": 100})
    state = train(CONFIG, tmp_path / "run", ov, progress=False)
    assert state["step"] == 5 and np.isfinite(state["history"][-1]["loss"])
    after = BiEncoder.from_pretrained(tmp_path / "run" / "after_synonyms")
    best = BiEncoder.from_pretrained(tmp_path / "run" / "best")
    a = dict(after.mention_model.named_parameters())
    moved = [n for n, p in best.mention_model.named_parameters() if not np.allclose(p.detach().numpy(), a[n].detach().numpy())]
    assert moved  # three more mention steps changed the weights after the snapshot


# ---------------------------------------------------------------- the loop itself, on a toy task
class ScriptedEvaluator(Evaluator):
    """Dev "accuracy" read from a script, one value per evaluation."""

    primary_metric = "acc"

    def __init__(self, values):
        self.values, self.calls = list(values), 0

    def __call__(self, model):
        self.calls += 1
        return {"acc": self.values[self.calls - 1]}


class ToyTask(Task):
    """Linear regression: 10 steps of a batch each, optional crash at one step."""

    def __init__(self, evaluator, checkpoint=None, crash_at=None):
        torch.manual_seed(0)
        self.net = torch.nn.Linear(3, 1)
        if checkpoint is not None:
            self.net.load_state_dict(load_file(str(checkpoint / "net.safetensors")))
        self.evaluator, self.crash_at, self.total_steps = evaluator, crash_at, 10
        self.lrs, self.losses = [], []

    @property
    def model(self):
        return self.net

    def optimizer(self):
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)  # state to restore: momentum
        return self.opt

    def batches(self, start):
        for step in range(start, self.total_steps):
            gen = torch.Generator().manual_seed(step)
            x = torch.randn(4, 3, generator=gen)
            yield step, x, x.sum(1, keepdim=True) * 10  # large targets: the gradient gets clipped

    def step(self, batch):
        step, x, y = batch
        if step == self.crash_at:
            raise RuntimeError("crash")
        self.lrs.append(self.opt.param_groups[0]["lr"])
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(float(loss.detach()))
        return StepOutput(loss, {"loss": float(loss.detach())})

    def save(self, folder):
        save_file({k: v.contiguous() for k, v in self.net.state_dict().items()}, str(folder / "net.safetensors"))


def test_loop_schedule_clipping_best_checkpoint_and_exact_resume(tmp_path):
    settings = LoopSettings(warmup=0.2, grad_clip=1.0, eval_every=3)
    scores = [0.1, 0.7, 0.3, 0.5]  # evaluations after steps 3, 6, 9 and 10
    whole = ToyTask(ScriptedEvaluator(scores))
    state = TrainingLoop(whole, settings, tmp_path / "whole").run(progress=False)
    # linear warm-up over 2 steps, then linear decay to 0 at step 10
    assert whole.lrs == pytest.approx([0.01 * f for f in [0.5, 1.0, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8]])
    assert [h["step"] for h in state["history"]] == [3, 6, 9, 10] and [h["acc"] for h in state["history"]] == scores
    assert state["history"][0]["loss"] == round(float(np.mean(whole.losses[:3])), 4)
    assert (state["best"], state["best_step"]) == (0.7, 6)
    best = load_file(str(tmp_path / "whole" / "best" / "net.safetensors"))
    last = load_file(str(tmp_path / "whole" / "last" / "net.safetensors"))
    assert not torch.equal(best["weight"], last["weight"])  # best/ is the model of step 6, not the last
    assert json.loads((tmp_path / "whole" / "train_log.json").read_text())["best_step"] == 6
    # a run that crashes at step 7 and resumes from its step-6 checkpoint ends exactly as the whole run
    out = tmp_path / "resumed"
    with pytest.raises(RuntimeError, match="crash"):
        TrainingLoop(ToyTask(ScriptedEvaluator(scores), crash_at=7), settings, out).run(progress=False)
    checkpoint = checkpoint_to_resume(out)
    assert checkpoint == out / "last"
    resumed = ToyTask(ScriptedEvaluator(scores[2:]), checkpoint)
    state2 = TrainingLoop(resumed, settings, out, checkpoint).run(progress=False)
    assert resumed.losses == whole.losses[6:] and resumed.lrs == whole.lrs[6:]
    assert torch.equal(load_file(str(out / "last" / "net.safetensors"))["weight"], last["weight"])
    assert {k: v for k, v in state2.items() if k != "train_seconds"} == {k: v for k, v in state.items() if k != "train_seconds"}
    assert checkpoint_to_resume(out, resume=False) is None


def test_loop_constant_schedule_without_clipping_evaluates_only_at_the_end(tmp_path):
    task = ToyTask(ScriptedEvaluator([0.2]))
    state = TrainingLoop(task, LoopSettings(schedule="constant", grad_clip=0.0, eval_every=0), tmp_path).run(progress=False)
    assert task.lrs == [0.01] * 10 and [h["step"] for h in state["history"]] == [10]
    assert state["history"][0]["loss"] == round(float(np.mean(task.losses)), 4)
    clipped = ToyTask(ScriptedEvaluator([0.2]))
    TrainingLoop(clipped, LoopSettings(schedule="constant", grad_clip=1.0, eval_every=0), tmp_path / "c").run(progress=False)
    assert clipped.losses[0] == task.losses[0] and clipped.losses[1] != task.losses[1]  # clipping changed the first step


def test_a_corpus_of_another_kb_is_refused_and_a_mostly_foreign_one_said(kb_dir, tiny_encoder_dir, tmp_path, caplog):
    """Gold ids none of which the KB has (another KB, or ids spelled otherwise) leave nothing to train on:
    one error naming the corpus, not a crash deep in the encoder; mostly absent ids: a warning."""
    from spacy_pel.files import InputError

    nlp = spacy.blank("en")

    def corpus_of(ids, name):
        docs = []
        for (text, a, b, _), kb_id in zip(SENTS, ids):
            doc = nlp.make_doc(text)
            doc.spans[GOLD_KEY] = [Span(doc, a, b, label="X", kb_id=kb_id)]
            docs.append(doc)
        write_docbin(docs, tmp_path / name)
        return tmp_path / name

    foreign = corpus_of([f"OTHER:{i}" for i in range(len(SENTS))], "foreign.spacy")
    with pytest.raises(InputError, match="foreign.spacy: none of its gold mentions has an id in the KB"):
        make_task(overrides(foreign, kb_dir, tiny_encoder_dir))
    mostly = corpus_of(["D1"] + [f"OTHER:{i}" for i in range(1, len(SENTS))], "mostly.spacy")
    with caplog.at_level("WARNING", logger="spacy_pel"):
        task = make_task(overrides(mostly, kb_dir, tiny_encoder_dir))
    assert len(task.stages[-1].examples) == 1 and "have ids the KB lacks and are left out" in caplog.text
