import json
from pathlib import Path

import pytest
import spacy
from spacy.tokens import DocBin, Span

from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.evaluation.linking import e2e_metrics
from spacy_pel.files import InputError
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.span_scorer import load_span_scorer
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.config import JointConfig
from spacy_pel.training.joint import DocExample, JointTask, train_e2e
from spacy_pel.training.loop import TrainingLoop, checkpoint_to_resume
from spacy_pel.training.run_config import load_config

CONFIG_DEFAULT = Path(__file__).resolve().parents[1] / "configs" / "train_e2e.cfg"
TEXTS = [
    ("Lithium carbonate toxicity was seen in the patient .", [(0, 2, "D1")]),
    ("The newborn had tricuspid regurgitation and atrial flutter today .", [(3, 5, "D2"), (6, 8, "D3")]),
    ("Aspirin was given , then warfarin was stopped .", [(0, 1, "D4"), (5, 6, "D5|D4")]),
    ("Bevacizumab caused harm .", [(0, 1, "NIL")]),
]


@pytest.fixture
def corpus(tmp_path):
    nlp = spacy.blank("en")
    docs = []
    for text, spans in TEXTS:
        doc = nlp.make_doc(text)
        doc.spans[GOLD_KEY] = [Span(doc, a, b, label="X", kb_id=i) for a, b, i in spans]
        doc.ents = list(doc.spans[GOLD_KEY])
        docs.append(doc)
    write_docbin(docs, tmp_path / "train.spacy")
    return tmp_path / "train.spacy"


def settings(corpus, kb_dir, tiny_encoder_dir, **extra):
    return {"paths.train": str(corpus), "paths.dev": str(corpus), "paths.kb": str(kb_dir),
            "encoder.base": str(tiny_encoder_dir), "training.batch_docs": 2, "training.lr": 0.003,
            "training.eval_every": 3, "training.eval_docs": 0, "training.device": "cpu", "spans.max_len": 4,
            "training.select": "strict", "training.link_weight": 1.0, "spans.kind": "span", "spans.pooling": "mean", **extra}


def test_doc_example_labels_gold_spans_and_keeps_in_kb_rows(corpus, kb_dir, tiny_encoder_dir):
    index = EntityIndex.from_disk(kb_dir)
    doc = spacy.blank("en").make_doc(TEXTS[2][0])
    doc.spans[GOLD_KEY] = [Span(doc, 0, 1, label="X", kb_id="D4"), Span(doc, 5, 6, label="X", kb_id="D5|D4")]
    ex = DocExample(doc, index, 4)
    assert int(ex.labels.sum()) == 2
    assert {(int(s), int(e)) for s, e, y in zip(ex.starts, ex.ends, ex.labels) if y} == {(0, 1), (5, 6)}
    assert ex.linked == [(0, 1, {index.row["D4"]}), (5, 6, {index.row["D5"], index.row["D4"]})]
    assert (ex.ends - ex.starts).max() <= 4


def test_doc_example_scores_a_gold_alternative_id_as_its_entity(corpus, kb_dir, tiny_encoder_dir):
    index = EntityIndex.from_disk(kb_dir)
    d4 = index.row["D4"]
    index.entities.alt_ids["OMIM:1"] = d4  # as MEDIC files an OMIM number under a MeSH record
    doc = spacy.blank("en").make_doc(TEXTS[2][0])
    doc.spans[GOLD_KEY] = [Span(doc, 0, 1, label="X", kb_id="OMIM:1")]
    ex = DocExample(doc, index, 4)
    assert ex.gold == [(0, 1, {"D4"})] and ex.linked == [(0, 1, {d4})]


def linker_for(best, kb_dir, threshold):
    nlp = spacy.blank("en")
    finder = {"@misc": "spacy_pel.mentions.span_finder.v1", "scorer": str(best / "span_scorer.safetensors"),
              "threshold": threshold}
    linker = nlp.add_pipe("pel_linker", config={"mentions": finder, "vectors": {"@misc": "spacy_pel.vectors.collective.v1"}})
    linker.set_resources(BiEncoder.from_pretrained(best), EntityIndex.from_disk(kb_dir))
    return nlp


@pytest.mark.parametrize("kind", ["kb", "sampled"])
def test_joint_training_lowers_both_losses_resumes_and_writes_a_usable_model(corpus, kb_dir, tiny_encoder_dir, tmp_path,
                                                                             kind, monkeypatch):
    import torch

    # "sampled": random negatives (12 steps are too few for this tiny model with hard ones)
    ov = settings(corpus, kb_dir, tiny_encoder_dir, **{"negatives.kind": kind, "negatives.count": 3, "training.max_steps": 12,
                                                       "negatives.hard_fraction": 0.0})
    cfg = JointConfig.from_config(load_config(CONFIG_DEFAULT, ov))
    scratch = JointTask(cfg)
    torch.manual_seed(0)
    scratch.encoder.eval()
    with torch.no_grad():
        _, link0, span0, _ = scratch.losses(scratch.train_docs)
        untrained = scratch.evaluator.choose_threshold(scratch.model)
    out = tmp_path / "run"
    state = train_e2e(CONFIG_DEFAULT, out, ov, progress=False)
    assert state["step"] == 12 and [h["step"] for h in state["history"]] == [3, 6, 9, 12]
    trained = JointTask(cfg, checkpoint_to_resume(out))
    assert TrainingLoop(trained, cfg.training, out, checkpoint_to_resume(out)).state["step"] == 12
    trained.encoder.eval()
    with torch.no_grad():
        _, link1, span1, _ = trained.losses(trained.train_docs)
    assert link1 < link0 and span1 < span0
    # the best model is an encoder folder + span scorer that pel_linker takes as they are, and with
    # the γ chosen in training it finds and links mentions: "Lithium carbonate" is D1, exactly
    best = out / "best"
    report = json.loads((best / "span_report.json").read_text())
    assert report["best_step"] == state["best_step"] == max(state["history"], key=lambda h: h["dev"]["strict"]["f"])["step"]
    assert report["dev"]["strict"]["f"] >= 0.5 > untrained["strict"]["f"]
    assert set(report["labels"]) <= {"Chemical", "Disease"} and report["labels"]  # KB type → corpus label, learned
    nlp = linker_for(best, kb_dir, report["threshold"])
    assert [(e.start, e.end, e.kb_id_) for e in nlp(TEXTS[0][0]).ents] == [(0, 2, "D1")]
    # the pipeline on the (training =) dev docs: half the gold mentions or more found and linked right
    gold = list(spacy.tokens.DocBin().from_disk(corpus).get_docs(nlp.vocab))
    assert e2e_metrics([nlp(d.text) for d in gold], gold)["strict"]["f"] >= 0.5
    assert load_span_scorer(best / "span_scorer.safetensors").hidden_size == trained.scorer.hidden_size
    # a run that stops after step 7 and is resumed ends exactly as the uninterrupted one
    step, steps = JointTask.step, []

    def stop_at_eight(self, batch):
        if len(steps) == 7:
            raise KeyboardInterrupt
        steps.append(1)
        return step(self, batch)

    monkeypatch.setattr(JointTask, "step", stop_at_eight)
    with pytest.raises(KeyboardInterrupt):
        train_e2e(CONFIG_DEFAULT, tmp_path / "again", ov, progress=False)
    monkeypatch.setattr(JointTask, "step", step)
    resumed = train_e2e(CONFIG_DEFAULT, tmp_path / "again", ov, progress=False)
    assert resumed["step"] == 12 and [h["step"] for h in resumed["history"]] == [3, 6, 9, 12]
    assert resumed["history"][:2] == state["history"][:2]  # the steps before the checkpoint at 6
    # after it the weights and optimizer state went on (random streams restart from the seed, so
    # the numbers are close, not equal)
    assert resumed["history"][2]["link_loss"] == pytest.approx(state["history"][2]["link_loss"], rel=0.1)


def test_train_e2e_cli(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    from typer.testing import CliRunner

    from spacy_pel.cli.train_e2e import app

    args = [str(CONFIG_DEFAULT), "--output", str(tmp_path / "cli")]
    for key, value in settings(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 2, "negatives.count": 3}).items():
        args += [f"--{key}", str(value)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cli" / "best" / "span_scorer.safetensors").exists()


def test_a_corpus_without_gold_spans_is_refused(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    """Raw text as the training (or dev) corpus would train, and select, a span model on nothing and exit 0."""
    raw = tmp_path / "raw.spacy"
    DocBin(docs=[spacy.blank("en").make_doc("Nothing is annotated here.")] * 2).to_disk(raw)
    for key, message in (("paths.train", "the span model would learn no span"), ("paths.dev", "selected on nothing")):
        ov = {**settings(corpus, kb_dir, tiny_encoder_dir), key: str(raw), "training.max_steps": 2}
        with pytest.raises(InputError, match=f"raw.spacy: none of its 2 documents has a gold span: .*{message}"):
            train_e2e(CONFIG_DEFAULT, tmp_path / "run", ov, progress=False)
    assert not (tmp_path / "run" / "best").exists()
