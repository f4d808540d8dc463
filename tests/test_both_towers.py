"""Both towers trained from mentions: a KB file without vectors, shared negatives, pool refreshes."""
import numpy as np
import pytest

from spacy_pel.models.encoder import BiEncoder
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.config import ConfigError
from spacy_pel.training.retriever import train

from .test_train import CONFIG, corpus, overrides  # noqa: F401 (fixture)


def test_both_towers_from_a_kb_file_with_shared_hard_negatives(corpus, kb_file, kb_dir, tiny_encoder_dir, tmp_path):  # noqa: F811
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{
        "paths.kb": str(kb_file), "paths.kb_format": "jsonl", "training.max_steps": 4,
        "training.train_entity_encoder": True, "training.eval_kb_sample": 2, "negatives.kind": "shared",
        "negatives.count": 2, "negatives.hard_fraction": 0.5, "negatives.refresh_every": 2, "negatives.pool": 3,
        "loss.name": "ce_cosine"})
    state = train(CONFIG, tmp_path / "run", ov, progress=False)
    assert state["step"] == 4 and np.isfinite(state["history"][-1]["loss"])
    best = BiEncoder.from_pretrained(tmp_path / "run" / "best")
    start = BiEncoder.from_pretrained(tiny_encoder_dir)
    assert best.fingerprint() != start.fingerprint()  # the entity tower learned: its KB is encoded after training
    with pytest.raises(ValueError, match="built with entity encoder"):
        EntityIndex.from_disk(kb_dir).check_encoder(best)


def test_a_kb_file_needs_a_trained_entity_tower(corpus, kb_file, kb_dir, tiny_encoder_dir, tmp_path):  # noqa: F811
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"paths.kb": str(kb_file), "paths.kb_format": "jsonl"})
    with pytest.raises(ConfigError, match="kb_format"):
        train(CONFIG, tmp_path / "run", ov, progress=False)
    ov.update({"training.train_entity_encoder": True, "negatives.hard_fraction": 0.5, "negatives.refresh_every": 0})
    with pytest.raises(ConfigError, match="refreshed"):
        train(CONFIG, tmp_path / "run", ov, progress=False)
