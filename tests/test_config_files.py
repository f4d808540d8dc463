"""train-reranker and train-spans read a typed config file like the other trainers (issue 30 item 4)."""
from dataclasses import asdict
from pathlib import Path

import pytest
import spacy
from confection import Config
from spacy.tokens import DocBin
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.cli import train_reranker as reranker_cli
from spacy_pel.training.config import ConfigError
from spacy_pel.training.config_files import RerankerFile, SpanScorerFile, read_config
from spacy_pel.training.reranker import RerankerConfig
from spacy_pel.training.run_config import load_config

from .test_e2e import gold_docs

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PATHS = {RerankerFile: ("encoder", "kb", "train"), SpanScorerFile: ("encoder", "train", "dev")}


@pytest.mark.parametrize("cls, name", [(RerankerFile, "train_reranker.cfg"), (SpanScorerFile, "train_spans.cfg")])
def test_the_shipped_file_is_the_defaults(cls, name):
    paths = {f"paths.{k}": k for k in PATHS[cls]}
    from_file, _ = read_config(cls, CONFIGS / name, paths)
    from_defaults, _ = read_config(cls, None, paths)
    assert asdict(from_file) == asdict(from_defaults)
    assert set(load_config(CONFIGS / name)) == {f for f in asdict(cls())}


def test_the_reranker_defaults_are_the_trainers():
    paths = {f"paths.{k}": k for k in PATHS[RerankerFile]}
    assert read_config(RerankerFile, None, paths)[0].settings() == RerankerConfig()


@pytest.mark.parametrize("cls, name, override, message", [
    (RerankerFile, "train_reranker.cfg", {"training.max_step": 5}, r"train_reranker.cfg \[training\]: unknown key\(s\) \['max_step'\]"),
    (RerankerFile, "train_reranker.cfg", {"mining.candidates": 1}, r"train_reranker.cfg \[mining\] candidates: `candidates` must be ≥ 2"),
    (RerankerFile, "train_reranker.cfg", {"training.retriever_weights": [1, "x"]}, r"\[training\] retriever_weights: expected a list"),
    (RerankerFile, None, {"paths.train": None}, r"\[paths\] train: needed"),
    (SpanScorerFile, "train_spans.cfg", {"spans.max_lenght": 4}, r"train_spans.cfg \[spans\]: unknown key\(s\) \['max_lenght'\]"),
    (SpanScorerFile, "train_spans.cfg", {"training.epochs": 2.5}, r"\[training\] epochs: expected an integer, got 2.5"),
    (SpanScorerFile, None, {"model.x": 1}, r"unknown section\(s\) \['model'\]"),
])
def test_a_bad_setting_is_refused_naming_section_and_key(cls, name, override, message):
    paths = {f"paths.{k}": k for k in PATHS[cls]}
    with pytest.raises(ConfigError, match=message):
        read_config(cls, CONFIGS / name if name else None, {**paths, **override})


def test_reranker_flags_and_section_keys_override_the_file(tmp_path, monkeypatch):
    text = (CONFIGS / "train_reranker.cfg").read_text(encoding="utf8")
    config = tmp_path / "r.cfg"
    config.write_text(text.replace("max_steps = 600", "max_steps = 7").replace("seed = 0", "seed = 3")
                      .replace("train = null", 'train = "corpus.spacy"'), encoding="utf8")
    (tmp_path / "corpus.spacy").write_bytes(b"")
    seen = {}
    monkeypatch.setattr(reranker_cli, "load_encoder", lambda source, precision: seen.setdefault("encoder", source))
    monkeypatch.setattr(reranker_cli, "train_reranker_from_config",
                        lambda cfg, raw, output, resume: seen.update(cfg=cfg, raw=raw, resume=resume) or {"ok": 1})
    monkeypatch.chdir(tmp_path)
    args = ["train-reranker", "--config", str(config), "-o", str(tmp_path / "out"), "--encoder", "enc", "--kb", "kbdir",
            "--lr", "0.001", "--seed", "9", "--training.seed", "9", "--model.pooling", "cls"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    settings = seen["cfg"].settings()
    assert (settings.max_steps, settings.lr, settings.seed, settings.pooling) == (7, 0.001, 9, "cls")
    assert seen["cfg"].paths.kb == "kbdir" and seen["encoder"] == "enc" and seen["resume"] is True
    assert seen["raw"]["training"]["max_steps"] == 7 and seen["raw"]["paths"]["encoder"] == "enc"
    bad = CliRunner().invoke(app, args + ["--training.max_step", "3"])
    assert bad.exit_code == 2 and "[training]: unknown key(s) ['max_step']" in bad.output
    args[args.index("--seed") + 1] = "5"  # a flag and its section key disagreeing: refused, neither wins
    both = CliRunner().invoke(app, args)
    assert both.exit_code == 2 and "--seed 5 and --training.seed 9 set the same thing" in both.output


def test_reranker_without_a_config_reads_the_defaults_and_needs_its_paths(tmp_path):
    result = CliRunner().invoke(app, ["train-reranker", "-o", str(tmp_path / "out"), "--encoder", "enc"])
    assert result.exit_code == 2 and "[paths] kb: needed (in the file or as --kb)" in result.output
    assert not (tmp_path / "out").exists()


def test_train_spans_from_its_config_file(tmp_path, tiny_encoder_dir):
    nlp = spacy.blank("en")
    corpus = tmp_path / "gold.spacy"
    DocBin(docs=gold_docs(nlp), store_user_data=True).to_disk(corpus)
    config = tmp_path / "spans.cfg"
    text = (CONFIGS / "train_spans.cfg").read_text(encoding="utf8")
    config.write_text(text.replace("train = null", f'train = "{corpus}"').replace("epochs = 8", "epochs = 30"), encoding="utf8")
    out = tmp_path / "spans"
    args = ["train-spans", "--config", str(config), "-o", str(out), "--encoder", str(tiny_encoder_dir), "--dev", str(corpus),
            "--lr", "0.05"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (out / "span_scorer.safetensors").exists()
    saved = Config().from_disk(out / "config.cfg")
    assert saved["training"] == {"epochs": 30, "lr": 0.05, "seed": 0} and saved["paths"]["dev"] == str(corpus)
    assert '"dev_span_strict"' in result.output


def test_train_spans_refuses_a_corpus_without_gold_spans(tmp_path, tiny_encoder_dir):
    """Raw text (or a corpus converted without its annotations) would train a span scorer on nothing and exit 0."""
    nlp = spacy.blank("en")
    DocBin(docs=[nlp.make_doc("No entity is annotated here.")] * 3).to_disk(tmp_path / "raw.spacy")
    gold = tmp_path / "gold.spacy"
    DocBin(docs=gold_docs(nlp), store_user_data=True).to_disk(gold)
    for train, dev in ((tmp_path / "raw.spacy", gold), (gold, tmp_path / "raw.spacy")):
        result = CliRunner().invoke(app, ["train-spans", "-o", str(tmp_path / "spans"), "--encoder", str(tiny_encoder_dir),
                                          "--train", str(train), "--dev", str(dev)])
        assert result.exit_code == 2, result.output
        assert "raw.spacy: none of its 3 documents has a gold span: the span scorer would" in result.output
    assert not (tmp_path / "spans" / "span_scorer.safetensors").exists()
