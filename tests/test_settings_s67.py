"""Out-of-range training settings are refused when the config is read, in one line naming the file, the
section and the key — before any corpus, KB or model is read: a negative seed, a device torch cannot use on
this machine, a negative hard-negative pool, refresh interval or KB sample (train / train-e2e / train-spans /
adapt), and the re-ranker's bad settings, which passed the config check and crashed after mining."""
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.training.adapt_config import AdaptConfig
from spacy_pel.training.config import ConfigError, JointConfig, RetrieverConfig, check_device
from spacy_pel.training.config_files import SpanScorerFile, read_config
from spacy_pel.training.run_config import load_config
from tests.test_cli_errors import one_line_error

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PATHS = {"paths.train": "train.spacy", "paths.dev": "dev.spacy", "paths.kb": "kb"}
TRAINED_TOWER = {"training.train_entity_encoder": True, "negatives.kind": "shared", "negatives.hard_fraction": 0.5}


@pytest.fixture
def no_cuda(monkeypatch):
    """This machine as one without CUDA, whatever it has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("override, message", [
    ({"training.seed": -1}, r"train_pb_random.cfg \[training\] seed: must be >= 0, not -1"),
    ({"training.device": "foo"}, r"\[training\] device: must be 'auto', 'cpu' or a torch device such as 'cuda', not 'foo'"),
    ({"training.device": "cuda"}, r"\[training\] device: 'cuda' is not a device of this machine"),
    ({**TRAINED_TOWER, "negatives.pool": -5}, r"\[negatives\] pool: must be >= 0, not -5"),
    ({**TRAINED_TOWER, "training.eval_kb_sample": -1}, r"\[training\] eval_kb_sample: must be >= 0, not -1"),
    ({"negatives.refresh_every": -1}, r"\[negatives\] refresh_every: must be >= 0, not -1"),
    ({"synonyms.pairs": -5}, r"\[synonyms\]: steps and pairs \(0 = every pair\) must be >= 0, not 0 and -5"),
    ({"arborescence.max_cluster": 0}, r"\[arborescence\]: refresh_every and max_cluster must be at least 1, not 60 and 0"),
    ({"arborescence.refresh_every": 0}, r"\[arborescence\]: refresh_every and max_cluster must be at least 1, not 0 and 32"),
])
def test_the_retrievers_out_of_range_settings_name_section_and_key(no_cuda, override, message):
    raw = load_config(CONFIGS / "train_pb_random.cfg", {**PATHS, **override})
    with pytest.raises(ConfigError, match=message):
        RetrieverConfig.from_config(raw, str(CONFIGS / "train_pb_random.cfg"))


@pytest.mark.parametrize("override, message", [
    ({"training.seed": -1}, r"train_e2e.cfg \[training\] seed: must be >= 0"),
    ({"training.device": "cuda:0"}, r"train_e2e.cfg \[training\] device: 'cuda:0' is not a device of this machine"),
])
def test_the_joint_models_seed_and_device(no_cuda, override, message):
    raw = load_config(CONFIGS / "train_e2e.cfg", {**PATHS, **override})
    with pytest.raises(ConfigError, match=message):
        JointConfig.from_config(raw, str(CONFIGS / "train_e2e.cfg"))


def test_adapt_checks_the_same_seed_and_device(no_cuda):
    for training, message in (({"seed": -1}, r"\[training\] seed: must be >= 0"), ({"device": "gpu"}, r"\[training\] device")):
        with pytest.raises(ConfigError, match=message):
            AdaptConfig.from_config({"kb": {"path": "x"}, "training": training})


def test_a_device_is_what_torch_can_use_here(monkeypatch):
    for device in ("auto", "cpu", "cpu:0"):
        check_device(device, "t")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for device in ("cuda", "cuda:1"):
        check_device(device, "t")
    with pytest.raises(ConfigError, match=r"t: 'cuda:2' is not a device of this machine \(2 cuda device\(s\)\)"):
        check_device("cuda:2", "t")
    for bad in ("meta", "CPU", ""):
        with pytest.raises(ConfigError, match="^t: "):
            check_device(bad, "t")


def test_the_cli_refuses_them_in_one_line_before_writing(tmp_path, no_cuda):
    config = CONFIGS / "train_pb_random.cfg"
    for args, fragment in ((["--training.seed", "-1"], "[training] seed: must be >= 0"),
                           (["--training.device", "cuda"], "[training] device: 'cuda' is not a device")):
        result = CliRunner().invoke(app, ["train", str(config), "-o", str(tmp_path / "out"), "--paths.train", "t.spacy",
                                          "--paths.kb", "kb", *args])
        one_line_error(result, fragment)
    result = CliRunner().invoke(app, ["train-spans", "-o", str(tmp_path / "out"), "--encoder", "enc", "--train", "t.spacy",
                                      "--dev", "d.spacy", "--seed", "-1"])
    one_line_error(result, "[training] seed: must be >= 0, not -1")
    assert not (tmp_path / "out").exists()


def test_the_span_scorers_seed():
    paths = {"paths.encoder": "enc", "paths.train": "t.spacy", "paths.dev": "d.spacy"}
    with pytest.raises(ConfigError, match=r"train_spans.cfg \[training\] seed: must be >= 0, not -3"):
        read_config(SpanScorerFile, CONFIGS / "train_spans.cfg", {**paths, "training.seed": -3})


# ---------------------------------------------------------------------------- train-reranker (config load, before mining)
RERANKER = ["train-reranker", "--encoder", "enc", "--kb", "kbdir", "--train", "t.spacy"]


@pytest.mark.parametrize("args, fragment", [
    (["--lr", "-1"], "[training] lr: "),
    (["--training.weight_decay", "-1"], "[training] weight_decay: "),
    (["--mention-length", "4"], "[model] mention_max_length: "),
    (["--mining.mining_context", "2"], "[mining] mining_context: "),
    (["--model.pooling", "foo"], "[model] pooling: "),
    (["--seed", "-1"], "[training] seed: "),
    (["--eval-every", "-1"], "[training] eval_every: "),
    (["--training.warmup", "5"], "[training] warmup: "),
])
def test_the_rerankers_bad_settings_are_refused_at_config_load(tmp_path, args, fragment):
    """They passed the config check and crashed after the candidate mining (or were silently accepted)."""
    one_line_error(CliRunner().invoke(app, [*RERANKER, "-o", str(tmp_path / "rr"), *args]), fragment)
    assert not (tmp_path / "rr").exists()


def test_the_linker_and_build_kb_refuse_a_device_this_machine_lacks(no_cuda):
    import spacy

    from spacy_pel.files import InputError
    from spacy_pel.retrieval.build import check_device as build_device

    with pytest.raises(ValueError, match=r"pel_linker: `device` 'cuda' is not a device of this machine"):
        spacy.blank("en").add_pipe("pel_linker", config={"device": "cuda"})  # torch's AssertionError at first use before
    with pytest.raises(InputError, match=r"--device: 'cuda:1' is not a device of this machine"):
        build_device("cuda:1")
