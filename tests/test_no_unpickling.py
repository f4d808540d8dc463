"""Weights are read from safetensors only, wherever a model comes from: a Hugging Face model folder with
only ``pytorch_model.bin`` (a base encoder, a re-ranker's base) and a saved re-ranker whose weights were
swapped for a pickle are refused before ``torch.load`` is ever called (a saved bi-encoder: test_encoder)."""
import shutil

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from spacy_pel.cli import build_kb
from spacy_pel.models.cross_encoder import CrossEncoder
from spacy_pel.models.encoder import BiEncoder


@pytest.fixture
def no_torch_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"torch.load called on {args[0] if args else kwargs}")
    monkeypatch.setattr(torch, "load", refuse)


def pickled(folder, tmp_path, name="pickled"):
    """A copy of the model ``folder`` whose safetensors weights are replaced by a pickle."""
    out = tmp_path / name
    shutil.copytree(folder, out)
    weights = load_file(out / "model.safetensors")
    (out / "model.safetensors").unlink()
    torch.save(weights, out / "pytorch_model.bin")
    return out


@pytest.mark.parametrize("model", [BiEncoder, CrossEncoder])
def test_a_pickle_only_base_model_is_refused(model, tiny_bert, tmp_path, no_torch_load):
    base = pickled(tiny_bert, tmp_path)
    with pytest.raises(OSError, match="no model.safetensors.*never read.*safe_serialization=True"):
        model.from_pretrained(str(base))
    assert model.from_pretrained(str(tiny_bert)) is not None  # safetensors: read as before


def test_a_saved_reranker_with_pickled_weights_is_refused(tiny_bert, tmp_path, no_torch_load):
    saved = tmp_path / "ce"
    CrossEncoder.from_pretrained(str(tiny_bert)).save(saved)
    swapped = tmp_path / "ce_swapped"
    shutil.copytree(saved, swapped)
    shutil.rmtree(swapped / "model")
    shutil.copytree(pickled(saved / "model", tmp_path, "model"), swapped / "model")
    with pytest.raises(OSError, match="no model.safetensors.*never read"):
        CrossEncoder.from_pretrained(swapped)
    assert CrossEncoder.from_pretrained(saved) is not None


def test_build_kb_refuses_a_pickle_only_encoder_in_one_line(tiny_bert, kb_file, tmp_path, no_torch_load):
    result = CliRunner().invoke(build_kb.app, ["--kb", str(kb_file), "-o", str(tmp_path / "kb"), "--encoder",
                                               str(pickled(tiny_bert, tmp_path))])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "no model.safetensors" in result.stderr and not (tmp_path / "kb").exists()
