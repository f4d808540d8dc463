import json
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.tokens import Span

from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.retriever import Trainer, load_config, train

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "train_pb_random.cfg"
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


def batch_loss(trainer):
    import torch

    torch.manual_seed(0)
    examples = trainer.stages[-1][1]
    trainer.encoder.eval()
    with torch.no_grad():
        trainer.random = type(trainer.random)(len(trainer.index), trainer.k, seed=1)
        return float(trainer.step_loss(examples))


def test_training_lowers_loss_and_resumes(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    out = tmp_path / "run"
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 10})
    before = batch_loss(Trainer(load_config(CONFIG, ov), tmp_path / "scratch"))
    state = train(CONFIG, out, ov, progress=False)
    assert state["step"] == 10 and [h["step"] for h in state["history"]] == [5, 10]
    log = json.loads((out / "train_log.json").read_text())
    assert log["skipped_train_mentions"] == {"nil": 1, "absent": 0}
    trained = Trainer(load_config(CONFIG, ov), out)  # resumes from out/last
    assert trained.resuming and trained.state["step"] == 10
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
    trainer = Trainer(load_config(CONFIG, ov), tmp_path / "run")
    (name, examples, steps), = trainer.stages
    assert name == "synonyms" and steps == 3 and len(examples) == 3  # Li2CO3, flutter, acetylsalicylic acid
    assert trainer.run(progress=False)["step"] == 3


def test_arborescence_objective_runs_and_uses_coreferent_mentions(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 4, "training.objective": "arborescence",
                                                       "arborescence.refresh_every": 2, "negatives.count": 4})
    trainer = Trainer(load_config(CONFIG, ov), tmp_path / "run")
    arbo = trainer.arborescence
    assert arbo is not None and {int(k): len(v) for k, v in arbo.members.items()} == {0: 1, 1: 1, 2: 1, 3: 2}
    state = trainer.run(progress=False)
    assert state["step"] == 4 and np.isfinite(state["history"][-1]["loss"])
    # negatives never include a coreferent mention (same gold entity)
    rows, real = arbo.negatives(arbo.vectors, np.arange(len(arbo.entity)), 2)
    for i, (r, ok) in enumerate(zip(rows, real)):
        assert all(arbo.entity[j] != arbo.entity[i] for j, o in zip(r, ok) if o)


@pytest.mark.parametrize("loss", ["ce", "proxy"])
def test_whole_kb_negatives_equal_every_non_gold_row_as_sampled_negative(corpus, kb_dir, tiny_encoder_dir, tmp_path, loss):
    import torch

    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"negatives.kind": "kb", "loss.name": loss})
    trainer = Trainer(load_config(CONFIG, ov), tmp_path / "kb")
    trainer.encoder.eval()
    batch = trainer.stages[-1][1]
    with torch.no_grad():
        got = float(trainer.step_loss(batch))
        m = trainer.encoder.embed_mentions(batch.inputs, normalize=trainer.normalize_mentions)
        n = len(trainer.index)
        rows = np.array([[r for r in range(n)] for _ in batch.gold])
        mask = torch.tensor([[r not in g for r in range(n)] for g in batch.gold])
        pos = trainer.table[[min(g) for g in batch.gold]]
        want = float(trainer.loss(m, pos, trainer.table[torch.from_numpy(rows)], mask))
    assert got == pytest.approx(want, rel=1e-5)
    # (the mask above drops every gold row, composite partners included: D4 for "D5|D4")
    state = train(CONFIG, tmp_path / "run", {**ov, "training.max_steps": 4}, progress=False)
    assert state["step"] == 4


def test_whole_kb_negatives_refuse_a_trained_entity_tower(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"negatives.kind": "kb", "training.train_entity_encoder": True})
    with pytest.raises(ValueError, match="frozen entity tower"):
        Trainer(load_config(CONFIG, ov), tmp_path / "kb")


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
    with pytest.raises(ValueError, match="precision"):
        Trainer(load_config(CONFIG, {**ov, "training.precision": "fp16"}), tmp_path / "bad")
