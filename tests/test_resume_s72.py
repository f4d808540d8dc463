"""Interrupted and resumed work (s72): a run that starts over leaves nothing of the earlier run that could be read
as its own; adapt resumes whatever the spelling of its inputs' paths; train-e2e's best/ always has its span report."""
import json
import logging
import shutil

import pytest
import spacy

from spacy_pel.files import InputError
from spacy_pel.pipeline.mentions import REPORT_FILE
from spacy_pel.training import loop, run_config
from spacy_pel.training.adapt import adapt
from spacy_pel.training.joint import JointTask, train_e2e
from spacy_pel.training.retriever import train
from spacy_pel.training.run_config import save_run_config, start_run
from spacy_pel.training.self_alignment import adapt_retriever
from tests.test_adapt import settings as names_settings
from tests.test_adapt import synonym_kb  # noqa: F401 (a fixture)
from tests.test_self_alignment import settings as alignment_settings
from tests.test_span_model import PER_MENTION, TEXTS, finder_pipeline
from tests.test_span_model import corpus as e2e_corpus  # noqa: F401 (a fixture)
from tests.test_span_model import settings as e2e_settings
from tests.test_train import CONFIG, corpus, overrides  # noqa: F401 (corpus: a fixture)
from tests.test_train_e2e import CONFIG_DEFAULT

RETRIEVER = {"training.max_steps": 4, "training.eval_every": 2}


def interrupt_at_first_evaluation(monkeypatch):
    def stop(self, losses, seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop.TrainingLoop, "evaluate_and_save", stop)


@pytest.mark.parametrize("again", [{"training.lr": 0.01}, {"training.resume": False}])
def test_a_run_starting_over_killed_before_its_first_evaluation_leaves_no_earlier_best(
        again, corpus, kb_dir, tiny_encoder_dir, tmp_path, monkeypatch, caplog):  # noqa: F811
    """Before, the new config.cfg stood beside the earlier run's best/ and train_log.json until the new run's first
    evaluation: a kill before it left the earlier model looking like this config's output."""
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **RETRIEVER)
    out = tmp_path / "run"
    train(CONFIG, out, ov, progress=False)
    assert (out / "best").is_dir() and (out / "train_log.json").exists()
    interrupt_at_first_evaluation(monkeypatch)
    with pytest.raises(KeyboardInterrupt), caplog.at_level(logging.INFO):
        train(CONFIG, out, {**ov, **again}, progress=False)
    assert "train_log.json" in caplog.text  # said, in the log
    assert sorted(p.name for p in out.iterdir()) == ["config.cfg", "inputs.json"]
    monkeypatch.undo()
    state = train(CONFIG, out, {**ov, **again}, progress=False)
    assert state["step"] == 4 and [h["step"] for h in state["history"]] == [2, 4]  # no earlier history mixed in


def test_a_resumed_run_keeps_its_outputs(corpus, kb_dir, tiny_encoder_dir, tmp_path, monkeypatch):  # noqa: F811
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **RETRIEVER)
    out = tmp_path / "run"
    train(CONFIG, out, ov, progress=False)
    before = sorted(p.name for p in out.iterdir())
    best = (out / "best" / "pel_encoder.json").stat().st_mtime_ns
    interrupt_at_first_evaluation(monkeypatch)
    train(CONFIG, out, {**ov, "training.max_steps": 4}, progress=False)  # resumed at its end: no evaluation
    assert sorted(p.name for p in out.iterdir()) == before
    assert (out / "best" / "pel_encoder.json").stat().st_mtime_ns == best


def test_the_earlier_outputs_are_gone_before_the_new_config_is_written(tmp_path, monkeypatch):
    """Every output of every trainer (the retriever's snapshots, train-spans' scorer and report, train-reranker's
    report) is set aside before config.cfg is written, and what a killed run left aside is removed."""
    out = tmp_path / "run"
    save_run_config({"training": {"lr": 0.1}}, out)
    start_run(out)
    names = ["last", "best", "after_synonyms", "seeds"]
    for name in names:
        (out / name).mkdir()
        (out / name / "x").write_text("x")
    for name in ("train_log.json", "span_scorer.safetensors", "span_report.json", "rerank_report.json",
                 "candidates.npz", "span_models.json"):
        (out / name).write_text("{}")
    (out / ".discarded-best").mkdir()  # left aside by a run killed before removing it
    (out / f"{run_config.DISCARDED}best" / "x").write_text("x")
    save_run_config({"training": {"lr": 0.2}}, out)
    seen = []
    write = run_config.atomic_write

    def watched(target, fn):
        seen.append(sorted(p.name for p in out.iterdir() if p.name != run_config.PENDING_FILE))
        return write(target, fn)

    monkeypatch.setattr(run_config, "atomic_write", watched)
    start_run(out)
    # kept: what is no run's output (train-reranker's mined candidates, train-e2e --seeds' own runs)
    assert seen[0] == ["candidates.npz", "config.cfg", "inputs.json", "seeds", "span_models.json"]
    assert sorted(p.name for p in out.iterdir()) == ["candidates.npz", "config.cfg", "inputs.json", "seeds",
                                                     "span_models.json"]
    assert json.loads((out / "inputs.json").read_text()) == {}


def test_adapt_resumes_whatever_the_spelling_of_its_kb_and_encoder_paths(synonym_kb, tiny_encoder_dir, tmp_path,  # noqa: F811
                                                                         monkeypatch, caplog):
    """Before, `adapt kb.jsonl` then `adapt /abs/kb.jsonl` (or ./kb.jsonl, or from another working folder) discarded
    the work folder as "made from another settings": the paths as typed were stamped, beside their contents."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_encoder_dir, tmp_path / "enc")
    out = tmp_path / "adapted"
    short = {"synonyms.steps": 4, "training.eval_every": 2}
    ways = [("kb.jsonl", "enc"), ("./kb.jsonl", "./enc"), (str(tmp_path / "kb.jsonl"), str(tmp_path / "enc"))]
    with caplog.at_level(logging.WARNING, logger="spacy_pel.training.adapt"):
        for kb, encoder in ways:
            state = adapt_retriever(None, out, alignment_settings(kb, encoder, **short), progress=False)
            assert state["step"] == 4 and "starting over" not in caplog.text, caplog.text
        (tmp_path / "sub").mkdir()
        monkeypatch.chdir(tmp_path / "sub")  # another working folder
        adapt_retriever(None, out, alignment_settings("../kb.jsonl", "../enc", **short), progress=False)
        assert "starting over" not in caplog.text
        adapt_retriever(None, out, alignment_settings("../kb.jsonl", "../enc", **short, **{"training.lr": 0.01}),
                        progress=False)  # a real change: named
    assert "made from other settings (training.lr): starting over" in caplog.text


def test_adapt_names_resumes_whatever_the_spelling_of_its_kb_path(synonym_kb, tiny_encoder_dir, tmp_path,  # noqa: F811
                                                                  monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "adapted"
    short = {"training.max_steps": 4, "training.eval_every": 2}
    with caplog.at_level(logging.WARNING, logger="spacy_pel.training.adapt"):
        for kb in ("kb.jsonl", "./kb.jsonl", str(tmp_path / "kb.jsonl")):
            state = adapt(None, out, names_settings(kb, tiny_encoder_dir, **short), progress=False)
            assert state["step"] == 4 and "starting over" not in caplog.text, caplog.text
        adapt(None, out, names_settings(kb, tiny_encoder_dir, **short, **{"training.lr": 0.01}), progress=False)
    assert "made from other settings (training.lr): starting over" in caplog.text


def test_an_interrupted_train_e2e_leaves_a_best_model_with_its_span_report(e2e_corpus, kb_dir, tiny_encoder_dir,  # noqa: F811
                                                                           tmp_path, monkeypatch):
    """Before, best/ got its span_report.json (γ, label map) only at the very end: after a kill, the span finder took
    best/ with γ = 0.5 and no label map, silently."""
    ov = e2e_settings(e2e_corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 6, "training.eval_every": 3,
                                                                "spans.labels": True})
    whole = train_e2e(CONFIG_DEFAULT, tmp_path / "whole", ov, progress=False)
    step, calls = JointTask.step, []

    def killed(self, batch):
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(1)
        return step(self, batch)

    monkeypatch.setattr(JointTask, "step", killed)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train_e2e(CONFIG_DEFAULT, out, ov, progress=False)  # best/ of step 3, then killed in step 5
    monkeypatch.undo()
    best = out / "best"
    report = json.loads((best / REPORT_FILE).read_text())
    assert report["best_step"] == 3 and "threshold" in report and report["labels"]
    nlp = finder_pipeline(kb_dir, tiny_encoder_dir, str(best))
    nlp(TEXTS[0][0])
    finder = nlp.get_pipe("pel_linker").mentions
    assert finder.threshold == report["threshold"] and finder.report_labels == report["labels"]
    # a span model folder without its report is refused in one line, unless the config gives γ
    (best / REPORT_FILE).rename(tmp_path / REPORT_FILE)
    with pytest.raises(InputError, match=f"{best}.*no {REPORT_FILE}.*`threshold`") as err:
        finder_pipeline(kb_dir, tiny_encoder_dir, str(best))(TEXTS[0][0])
    assert "\n" not in str(err.value)
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "encoder": str(tiny_encoder_dir), "vectors": PER_MENTION,
                                       "mentions": {"@misc": "spacy_pel.mentions.span_finder.v1", "model": str(best),
                                                    "threshold": 0.3}})
    nlp(TEXTS[0][0])
    (tmp_path / REPORT_FILE).rename(best / REPORT_FILE)
    # resumed: the run ends as an uninterrupted one, its best/ with its report
    state = train_e2e(CONFIG_DEFAULT, out, ov, progress=False)
    assert state["span_report"] == whole["span_report"] == json.loads((best / REPORT_FILE).read_text())
    assert state["span_report"]["best_step"] == state["best_step"]
