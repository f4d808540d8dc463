"""A KB folder missing a file is named as incomplete at load, not a bare FileNotFoundError (issue 32 item 4)."""
import shutil

import pytest

from spacy_pel.retrieval.index import EntityIndex, IncompleteKBError


def test_a_kb_without_its_vectors_is_named_incomplete(kb_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(kb_dir, broken)
    (broken / "embeddings.npy").unlink()
    with pytest.raises(IncompleteKBError, match=r"KB folder .*broken is incomplete: embeddings.npy is missing"):
        EntityIndex.from_disk(broken)
    assert len(EntityIndex.from_disk(kb_dir)) == 5  # the complete one loads


def test_a_missing_encoder_is_one_error_line_and_leaves_no_output(tmp_path, kb_dir, monkeypatch):
    import huggingface_hub.constants
    from typer.testing import CliRunner

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network wait for "nope"

    from spacy_pel.cli import app

    corpus = tmp_path / "train.spacy"
    corpus.write_bytes(b"")
    for args in (["train-spans", "--encoder", "nope", "--train", str(corpus), "--dev", str(corpus), "-o", str(tmp_path / "s")],
                 ["train-reranker", "--encoder", "nope", "--kb", str(kb_dir), "--train", str(corpus), "-o", str(tmp_path / "r")]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "error: encoder not found: nope" in result.output and "Repo id" not in result.output
    assert not (tmp_path / "s").exists() and not (tmp_path / "r").exists()
