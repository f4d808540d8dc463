"""Tests pinning behaviour that hand mutation testing (round 3, /tmp/hSS) found unchecked: each fails on the mutant
named in its docstring and passes on the code as it is.

A1: adapt's positive pairs are two different names; A3: adapt's hard negatives are no names of the anchor's entity;
A4: a resumed adapt run goes on with the pool it saved; L4: ``train_seconds`` sums every interval; R4: with both
towers the hard index is refreshed every ``refresh_every`` steps; S3: the span scorer's batches from a step; N3: the
NIL classifier is fitted without the mentions of ids the KB lacks."""
import numpy as np
import pytest
import spacy
import torch

from spacy_pel.corpora import write_docbin
from spacy_pel.evaluation.nil import calibrate
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.training import loop, span_scorer
from spacy_pel.training import retriever as retriever_module
from spacy_pel.training.adapt import AdaptTask, adapt, nested, work_folder
from spacy_pel.training.adapt_config import AdaptConfig

from .test_adapt import read_kb_records, settings, synonym_kb  # noqa: F401 (synonym_kb: a fixture)
from .test_e2e import gold_docs
from .test_evaluate import gold_doc
from .test_train import CONFIG, corpus, overrides  # noqa: F401 (corpus: a fixture)


def _adapt_task(kb, encoder, **extra) -> AdaptTask:
    cfg = AdaptConfig.from_config(nested(settings(kb, encoder, **extra)), "test")
    return AdaptTask(cfg, read_kb_records())


# ------------------------------------------------------------------ A1: a positive pair is two names
def test_adapt_positive_pairs_are_two_different_names_of_one_entity(synonym_kb, tiny_encoder_dir):  # noqa: F811
    """A1 (``b = (a + 1 + …) % counts`` → ``(a + …) % counts``): every row of an adapt batch holds two
    *different* names of the same entity; a name paired with itself teaches nothing (its cosine is 1 already)."""
    task = _adapt_task(synonym_kb, tiny_encoder_dir, **{"training.max_steps": 40})
    rows = np.concatenate(list(task.batches(0)))
    assert len(rows) == 40 * 4
    assert (rows[:, 0] != rows[:, 1]).all()
    assert (task.names.label[rows[:, 0]] == task.names.label[rows[:, 1]]).all()


# ------------------------------------------------------------------ A3: hard negatives are other entities' names
def test_adapt_hard_negatives_leave_out_the_anchors_own_names(synonym_kb, tiny_encoder_dir):  # noqa: F811
    """A3 (the ``related`` filter dropped from ``hard_slots``): the pool names nearest an anchor are its own
    entity's synonyms; they are not taken as its hard negatives (that would push synonyms apart), other
    entities' nearest names are."""
    task = _adapt_task(synonym_kb, tiny_encoder_dir, **{"negatives.per_batch": 4})
    names = task.names
    n_entities = int(names.label.max()) + 1
    slots = np.arange(len(names))
    pool = torch.nn.functional.one_hot(torch.from_numpy(names.label), n_entities).float()
    pool[names.label == 5] *= 1.2  # entity 5's names the nearest to every anchor after its own names
    pool += 0.5
    task.pool = (pool, slots)
    anchor_slots = names.first[[0, 3]]  # lithium carbonate (3 names), aspirin (3 names)
    anchors = pool[torch.from_numpy(anchor_slots)]
    chosen = task.hard_slots(anchors, anchor_slots)  # 2 an anchor; its own 3 names are its nearest
    assert (names.label[chosen] == 5).all()  # the nearest names of another entity, none of an anchor's own
    assert 2 <= len(chosen) <= 3  # entity 5 has 3 names; the anchors may take different ones


# ------------------------------------------------------------------ A4: a resumed adapt run keeps its pool
def test_an_interrupted_adapt_run_resumed_ends_as_an_uninterrupted_one(synonym_kb, tiny_encoder_dir, tmp_path,  # noqa: F811
                                                                        monkeypatch):
    """A4 (adapt's ``start`` ignores the pool saved in the checkpoint and draws a new one): interrupted after
    its first checkpoint (step 3, the pool last refreshed at step 2) and run again, adapt goes on with the pool
    the interrupted run had (not one drawn at step 3), and writes the last-step encoder an uninterrupted run writes."""
    extra = {"training.max_steps": 6, "training.eval_every": 3, "negatives.pool": 6, "negatives.refresh_every": 2}
    whole = adapt(None, tmp_path / "whole", settings(synonym_kb, tiny_encoder_dir, **extra), progress=False)
    save = loop.save_checkpoint

    def save_then_stop(*args, **kwargs):
        save(*args, **kwargs)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(loop, "save_checkpoint", save_then_stop)
        with pytest.raises(KeyboardInterrupt):
            adapt(None, tmp_path / "cut", settings(synonym_kb, tiny_encoder_dir, **extra), progress=False)
    state = adapt(None, tmp_path / "cut", settings(synonym_kb, tiny_encoder_dir, **extra), progress=False)
    assert state["step"] == 6 and [h["step"] for h in state["history"]] == [3, 6]
    assert state["history"][-1]["loss"] == pytest.approx(whole["history"][-1]["loss"], abs=1e-4)
    # the last step's encoder (the output is the best one, which may be step 3's)
    final = BiEncoder.from_pretrained(work_folder(tmp_path / "whole") / "last" / "encoder").entity_model.state_dict()
    cut = BiEncoder.from_pretrained(work_folder(tmp_path / "cut") / "last" / "encoder").entity_model.state_dict()
    assert all(torch.allclose(final[k].float(), cut[k].float(), atol=1e-6) for k in final)


# ------------------------------------------------------------------ L4: train_seconds sums the intervals
def test_train_seconds_is_the_sum_of_every_evaluation_interval(synonym_kb, tiny_encoder_dir, tmp_path,  # noqa: F811
                                                               monkeypatch):
    """L4 (``train_seconds += seconds`` → ``=``): the loop state's ``train_seconds`` (which a time budget counts
    on over resumes, and the logs report) is the training time of all intervals, not of the last one."""
    intervals = []
    evaluate = loop.TrainingLoop.evaluate_and_save

    def record(self, losses, seconds):
        intervals.append(seconds)
        return evaluate(self, losses, seconds)

    monkeypatch.setattr(loop.TrainingLoop, "evaluate_and_save", record)
    state = adapt(None, tmp_path / "a", settings(synonym_kb, tiny_encoder_dir), progress=False)
    assert len(intervals) == 2 and min(intervals) > 0
    assert state["train_seconds"] == pytest.approx(sum(intervals))


# ------------------------------------------------------------------ R4: the hard index's refresh steps
def test_both_towers_refresh_the_hard_index_every_refresh_every_steps(corpus, kb_file, kb_dir, tiny_encoder_dir,  # noqa: F811
                                                                      tmp_path, monkeypatch):
    """R4 (``step % every == 0`` → ``== 1``): with a trained entity tower the hard-negative index is built at the
    start and rebuilt at steps ``refresh_every``, ``2 * refresh_every``, … (not one step after each)."""
    steps = []
    refresh = retriever_module.RetrieverTask.refresh_hard_index

    def record(self, step):
        steps.append(step)
        return refresh(self, step)

    monkeypatch.setattr(retriever_module.RetrieverTask, "refresh_hard_index", record)
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{
        "paths.kb": str(kb_file), "paths.kb_format": "jsonl", "training.max_steps": 5, "training.eval_every": 100,
        "training.train_entity_encoder": True, "training.eval_kb_sample": 2, "negatives.kind": "shared",
        "negatives.count": 2, "negatives.hard_fraction": 0.5, "negatives.refresh_every": 2, "negatives.pool": 3,
        "loss.name": "ce_cosine"})
    retriever_module.train(CONFIG, tmp_path / "run", ov, progress=False)
    assert steps == [0, 2, 4]


# ------------------------------------------------------------------ S3: the span scorer's batches
def test_span_scorer_batches_are_every_document_each_epoch_from_any_step(tiny_encoder_dir):
    """S3 (``step >= start`` → ``step > start``): the span scorer trains on every document with spans once an
    epoch (``total_steps`` batches, the first one too), and a run resumed at step ``k`` gets the batches an
    uninterrupted run has from step ``k`` on."""
    docs = gold_docs(spacy.blank("en"))
    task = span_scorer.SpanScorerTask(BiEncoder.from_pretrained(tiny_encoder_dir), docs, docs[:2], epochs=2)
    whole = list(task.batches(0))
    assert len(whole) == task.total_steps == 2 * len(docs)
    assert {id(b) for b in whole[: len(docs)]} == {id(ex) for ex in task.train}  # each document once in epoch 1
    for k in (1, len(docs), len(whole) - 1):
        assert [id(b) for b in task.batches(k)] == [id(b) for b in whole[k:]]


# ------------------------------------------------------------------ N3: the NIL classifier's rows
@pytest.mark.filterwarnings("ignore:pel_linker. this pipeline has no NIL threshold")
def test_nil_classifier_is_fitted_without_mentions_of_ids_the_kb_lacks(kb_dir, tmp_path):
    """N3 (``fit = in_kb | is_nil`` → every mention): ``calibrate --nil classifier`` fits its classifier on the
    in-KB and NIL mentions only; mentions whose gold id the KB lacks (another KB's ids) are neither, so adding
    them to the corpus leaves the fitted classifier as it was."""
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    nlp.to_disk(tmp_path / "pipe")
    docs = [gold_doc(nlp, [(0, 2, "D1"), (4, 6, "NIL"), (7, 9, "D3")]),
            gold_doc(nlp, [(0, 2, "NIL"), (4, 6, "D2"), (7, 9, "NIL")])]
    lacking = [gold_doc(nlp, [(0, 2, "MESH:X1"), (4, 6, "MESH:X2"), (7, 9, "MESH:X3")])] * 3
    write_docbin(docs, tmp_path / "dev.spacy")
    write_docbin(docs + lacking, tmp_path / "more.spacy")
    summary = calibrate(tmp_path / "pipe", tmp_path / "dev.spacy", tmp_path / "out", nil="classifier")
    more = calibrate(tmp_path / "pipe", tmp_path / "more.spacy", tmp_path / "out2", nil="classifier")
    assert more["mentions"] == summary["mentions"] + 9
    assert more["classifier"] == summary["classifier"]
