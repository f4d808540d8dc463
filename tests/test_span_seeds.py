"""``train-e2e --seeds N``: N span models in one output folder, listed in its span_models.json, which
the span finder's ``model`` may name to average them all; saved with the pipeline, and a finished
run resumes at its end instead of training again."""
import shutil

import pytest
import spacy
import srsly
import torch
from confection import Config

import spacy_pel.training.joint as joint
from spacy_pel.models.span_scorer import SpanScorer, load_span_scorer, save_span_scorer
from spacy_pel.pipeline import mentions as mentions_module
from spacy_pel.pipeline.span_ensemble import listed_models
from spacy_pel.training.joint import train_e2e_seeds
from tests.test_span_model import TEXTS, corpus, finder_pipeline, found, recorded_probabilities, settings, span_model  # noqa: F401 (corpus, span_model: fixtures)
from tests.test_train_e2e import CONFIG_DEFAULT


def test_seeds_train_distinct_models_that_the_finder_averages_from_one_folder(corpus, kb_dir, tiny_encoder_dir, tmp_path, monkeypatch):  # noqa: F811
    run = tmp_path / "run"
    ov = settings(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 12, "training.seed": 5})
    states = train_e2e_seeds(CONFIG_DEFAULT, run, 2, ov, progress=False)
    assert [s["step"] for s in states] == [12, 12]
    assert srsly.read_json(run / "span_models.json") == ["best", "seeds/1/best"]
    assert Config().from_disk(run / "config.cfg")["training"]["seed"] == 5
    assert Config().from_disk(run / "seeds" / "1" / "config.cfg")["training"]["seed"] == 6  # seed + k
    first, second = (load_span_scorer(run / f / "span_scorer.safetensors") for f in ("best", "seeds/1/best"))
    assert not all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters()))

    seen = recorded_probabilities(monkeypatch)
    pipeline = lambda model: finder_pipeline(kb_dir, tiny_encoder_dir, model)  # noqa: E731

    text = TEXTS[0][0]
    listed = [pipeline(str(run / "best")), pipeline(str(run / "seeds" / "1" / "best")), pipeline(str(run))]
    out = [found(nlp(nlp.make_doc(text))) for nlp in listed][-1]
    p_first, p_second, p_folder = seen[-3:]
    assert p_folder == pytest.approx((p_first + p_second) / 2, abs=1e-5)  # the folder stands for both of its models
    both = listed[-1]
    both.to_disk(tmp_path / "pipe")
    shutil.copytree(run, tmp_path / "kept")
    shutil.rmtree(run)  # a packaged pipeline: the training folder is gone, the saved members still come with it
    again = spacy.load(tmp_path / "pipe")
    assert found(again(again.make_doc(text))) == out and len(again.get_pipe("pel_linker").mentions.members) == 1

    # run again on the finished folder: each model resumes at its end (no step trained twice)
    shutil.copytree(tmp_path / "kept", run)
    again_states = train_e2e_seeds(CONFIG_DEFAULT, run, 2, ov, progress=False)
    assert [s["step"] for s in again_states] == [12, 12]
    assert [s["train_seconds"] for s in again_states] == pytest.approx([s["train_seconds"] for s in states])
    # one model again: the list follows, so no stale second model is averaged in
    train_e2e_seeds(CONFIG_DEFAULT, run, 1, ov, progress=False)
    assert srsly.read_json(run / "span_models.json") == ["best"]
    assert pipeline(str(run)).get_pipe("pel_linker").mentions.member_sources == []


def test_a_rerun_killed_midway_does_not_leave_the_earlier_runs_list(corpus, kb_dir, tiny_encoder_dir, tmp_path, monkeypatch):  # noqa: F811
    """Two models trained; the run again with other settings, killed in its second model: the folder stood for the
    new first model and the earlier run's second, trained with the old settings (session 72 left this alone)."""
    run = tmp_path / "run"
    train_e2e_seeds(CONFIG_DEFAULT, run, 2, settings(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 2}),
                    progress=False)
    assert srsly.read_json(run / "span_models.json") == ["best", "seeds/1/best"]
    trained, real = [], joint.train_e2e

    def killed_in_the_second(config, folder, overrides, progress):
        if trained:
            raise KeyboardInterrupt
        trained.append(folder)
        return real(config, folder, overrides, progress)

    monkeypatch.setattr(joint, "train_e2e", killed_in_the_second)
    with pytest.raises(KeyboardInterrupt):
        train_e2e_seeds(CONFIG_DEFAULT, run, 2, settings(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 3}),
                        progress=False)
    assert listed_models(str(run)) == [str(run / "best")]


def test_a_bad_model_list_is_refused_naming_its_file(tmp_path):
    (tmp_path / "span_models.json").write_text('{"best": 1}', encoding="utf8")
    with pytest.raises(ValueError, match="span_models.json"):
        mentions_module.span_finder_mentions(model=str(tmp_path))
    with pytest.raises(ValueError, match="seeds"):
        train_e2e_seeds(CONFIG_DEFAULT, tmp_path / "run", 0)


def test_a_span_model_whose_scorer_does_not_fit_its_transformer_is_refused_by_name(span_model, kb_dir, tiny_encoder_dir, tmp_path):  # noqa: F811
    best, _, _ = span_model
    wrong = tmp_path / "wrong"
    shutil.copytree(best, wrong)
    hidden = load_span_scorer(best / "span_scorer.safetensors").hidden_size
    save_span_scorer(SpanScorer(hidden + 8, ["Chemical", "Disease"], "bio"), wrong / "span_scorer.safetensors")
    for model in (str(wrong), [str(best), str(wrong)]):  # the first model, or a further one
        nlp = finder_pipeline(kb_dir, tiny_encoder_dir, model)
        with pytest.raises(ValueError, match=f"span model {wrong}.*size {hidden + 8}.*gives {hidden}"):
            nlp(TEXTS[0][0])
