"""The training commands: a run refused for its inputs leaves the previous run's checkpoint as it was; an
output inside an input folder is refused; train-reranker refuses a KB of another encoder, re-mines when the
retriever at the same path changed and refuses bad settings before mining; train-e2e trains without a dev
corpus and refuses a corpus whose ids are not in the KB; the progress bar says n/a before an evaluation."""
import json
import logging
import math
import shutil

import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.files import InputError
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.retrieval.build import build_kb
from spacy_pel.training import loop
from spacy_pel.training.joint import train_e2e
from spacy_pel.training.reranker import RerankerConfig
from spacy_pel.training.retriever import train
from tests.test_train import CONFIG, corpus, overrides  # noqa: F401 (corpus: a fixture)
from tests.test_train_e2e import CONFIG_DEFAULT, settings

RETRIEVER = {"training.max_steps": 4, "training.eval_every": 2}


def test_a_run_refused_for_its_inputs_keeps_the_previous_checkpoint(corpus, kb_dir, tiny_encoder_dir, tmp_path, caplog):  # noqa: F811
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **RETRIEVER)
    out = tmp_path / "run"
    train(CONFIG, out, ov, progress=False)
    config = (out / "config.cfg").read_text()
    for bad in ({"paths.dev": str(tmp_path / "dev_typo.spacy")}, {"training.lr": 0.01, "paths.train": str(tmp_path / "nope.spacy")}):
        with caplog.at_level(logging.WARNING), pytest.raises(FileNotFoundError, match="corpus not found"):
            train(CONFIG, out, {**ov, **bad}, progress=False)
        assert "starting over" not in caplog.text
        assert (out / "last" / "state.json").exists() and (out / "config.cfg").read_text() == config
    resumed = train(CONFIG, out, ov, progress=False)  # the first run's settings: its checkpoint, at its end
    assert resumed["step"] == 4 and "starting over" not in caplog.text
    with caplog.at_level(logging.WARNING):
        again = train(CONFIG, out, {**ov, "training.lr": 0.01}, progress=False)  # other settings that run: anew
    assert "starting over" in caplog.text and again["step"] == 4 and "lr = 0.01" in (out / "config.cfg").read_text()


def test_an_output_in_or_around_an_input_folder_is_refused(corpus, kb_dir, tiny_encoder_dir, tmp_path):  # noqa: F811
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **RETRIEVER)
    before = sorted(p.name for p in kb_dir.iterdir())
    for output, how in ((kb_dir, "is"), (kb_dir / "run", "is inside"), (kb_dir.parent, "holds")):
        with pytest.raises(InputError, match=f"output {output} {how} the input folder .*paths.kb"):
            train(CONFIG, output, ov, progress=False)
    assert sorted(p.name for p in kb_dir.iterdir()) == before  # nothing written into the KB
    result = CliRunner().invoke(app, ["train", str(CONFIG), "-o", str(tiny_encoder_dir / "run"), *sum(
        ([f"--{k}", str(v)] for k, v in ov.items()), [])])
    assert result.exit_code == 2 and result.output.startswith("error: output") and "encoder.base" in result.output


def _reranker_args(out, encoder, kb, train_file, base):
    return ["train-reranker", "-o", str(out), "--encoder", str(encoder), "--kb", str(kb), "--train", str(train_file),
            "--base", str(base), "--candidates", "3", "--max-steps", "2", "--eval-every", "2", "--held-out-docs", "1",
            "--batch-mentions", "2"]


def test_train_reranker_refuses_a_kb_of_another_encoder(corpus, kb_file, kb_dir, tiny_encoder_dir, tiny_bert,  # noqa: F811
                                                        other_tiny_bert, tmp_path):
    other, kb = tmp_path / "other", tmp_path / "kb_other"
    BiEncoder.from_pretrained(str(other_tiny_bert)).save(other)
    build_kb(kb_file, kb, format="jsonl", encoder=str(other), progress=False)
    result = CliRunner().invoke(app, _reranker_args(tmp_path / "rr", tiny_encoder_dir, kb, corpus, tiny_bert))
    assert result.exit_code == 2 and "error: this KB was built with entity encoder" in result.output
    assert not (tmp_path / "rr" / "candidates.npz").exists()
    # after a run with the right KB, the refused one leaves its checkpoint and config: the next run resumes it
    out = tmp_path / "done"
    assert CliRunner().invoke(app, _reranker_args(out, tiny_encoder_dir, kb_dir, corpus, tiny_bert)).exit_code == 0
    config = (out / "config.cfg").read_text()
    result = CliRunner().invoke(app, _reranker_args(out, tiny_encoder_dir, kb, corpus, tiny_bert))
    assert result.exit_code == 2 and "starting over" not in result.output
    assert (out / "last" / "state.json").exists() and (out / "config.cfg").read_text() == config
    result = CliRunner().invoke(app, _reranker_args(out, tiny_encoder_dir, kb_dir, corpus, tiny_bert))
    assert result.exit_code == 0 and "starting over" not in result.output


def test_train_reranker_mines_again_when_the_retriever_at_its_path_changed(corpus, kb_file, tiny_bert, tmp_path):  # noqa: F811
    retriever, kb, out = tmp_path / "retriever", tmp_path / "kb", tmp_path / "rr"
    BiEncoder.from_pretrained(str(tiny_bert)).save(retriever)
    build_kb(kb_file, kb, format="jsonl", encoder=str(retriever), progress=False)
    args = _reranker_args(out, retriever, kb, corpus, tiny_bert)
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert CliRunner().invoke(app, args).exit_code == 0
    assert json.loads((out / "rerank_report.json").read_text())["mined_now"] is False  # the same retriever: reused
    encoder = BiEncoder.from_pretrained(retriever)  # retrained: another mention tower, the same entity tower
    for p in encoder.mention_model.parameters():
        p.data.mul_(0.5)
    shutil.rmtree(retriever)
    encoder.save(retriever)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads((out / "rerank_report.json").read_text())["mined_now"] is True


@pytest.mark.parametrize("bad, key", [({"lr": -1.0}, "lr"), ({"weight_decay": -1.0}, "weight_decay"), ({"seed": -1}, "seed"),
                                      ({"lr": math.nan}, "lr"), ({"warmup": 5.0}, "warmup"), ({"eval_every": -1}, "eval_every"),
                                      ({"pooling": "foo"}, "pooling"), ({"mention_max_length": 4}, "mention_max_length"),
                                      ({"mining_context": 2}, "mining_context")])
def test_reranker_settings_out_of_range_are_refused(bad, key):
    with pytest.raises(ValueError, match=f"`{key}`"):
        RerankerConfig(**bad)
    RerankerConfig(eval_every=0)  # evaluated at the end only


def test_train_reranker_refuses_bad_settings_before_mining(corpus, kb_dir, tiny_encoder_dir, tiny_bert, tmp_path):  # noqa: F811
    for flags, where in ((["--lr", "-1"], "[training] lr"), (["--model.pooling", "foo"], "[model] pooling"),
                         (["--mention-length", "4"], "[model] mention_max_length")):
        result = CliRunner().invoke(app, _reranker_args(tmp_path / "rr", tiny_encoder_dir, kb_dir, corpus, tiny_bert) + flags)
        assert result.exit_code == 2 and where in result.output and "Traceback" not in result.output, result.output
        assert not (tmp_path / "rr" / "candidates.npz").exists()


def test_train_e2e_without_a_dev_corpus(corpus, kb_dir, tiny_encoder_dir, tmp_path):  # noqa: F811
    ov = settings(corpus, kb_dir, tiny_encoder_dir, **{"paths.dev": None, "training.max_steps": 2, "training.eval_every": 1,
                                                       "training.select": "span"})
    state = train_e2e(CONFIG_DEFAULT, tmp_path / "run", ov, progress=False)
    assert state["step"] == 2 and state["best"] is None and state["best_step"] == 2 and state["span_report"] is None
    dev = state["history"][0]["dev"]
    assert set(dev) == {"threshold", "span", "strict", "gold_span_R@1"} and math.isnan(dev["span"]["f"])
    assert (tmp_path / "run" / "best").is_dir()


def test_train_e2e_refuses_a_corpus_without_ids_in_the_kb(kb_dir, tiny_encoder_dir, tmp_path):
    nlp = spacy.blank("en")
    doc = nlp.make_doc("Lithium carbonate toxicity was seen in the patient .")
    doc.spans[GOLD_KEY] = [Span(doc, 0, 2, label="X", kb_id="OTHER:1")]
    doc.ents = list(doc.spans[GOLD_KEY])
    write_docbin([doc, doc], tmp_path / "absent.spacy")
    absent = tmp_path / "absent.spacy"
    ov = settings(absent, kb_dir, tiny_encoder_dir, **{"training.max_steps": 2})
    with pytest.raises(InputError, match="absent.spacy: none of its gold mentions has an id in the KB"):
        train_e2e(CONFIG_DEFAULT, tmp_path / "run", ov, progress=False)
    # spans only (no linking loss) and chosen by span F1: the ids do not matter
    state = train_e2e(CONFIG_DEFAULT, tmp_path / "spans", {**ov, "training.link_weight": 0.0, "training.select": "span"},
                      progress=False)
    assert state["step"] == 2


def test_the_progress_bar_says_n_a_before_the_first_evaluation(corpus, kb_dir, tiny_encoder_dir, tmp_path, monkeypatch):  # noqa: F811
    shown = []

    class Bar:
        def __init__(self, *args, **kwargs):
            pass

        def update(self, n):
            pass

        def set_postfix(self, values):
            shown.append(values["dev"])

        def close(self):
            pass

    monkeypatch.setattr(loop, "tqdm", Bar)
    train(CONFIG, tmp_path / "run", overrides(corpus, kb_dir, tiny_encoder_dir, **RETRIEVER), progress=False)
    assert shown[:2] == ["n/a", "n/a"] and shown[2] != "n/a"  # evaluated after step 2
