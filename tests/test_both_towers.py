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


def test_entity_lr_scale_slows_the_entity_tower_only(corpus, kb_file, kb_dir, tiny_encoder_dir, tmp_path):  # noqa: F811
    """entity_lr_scale = 0.01: after the same steps the entity tower moved far less than with 1.0, the
    mention tower as much (a scale applied to the wrong group, or to both, fails this)."""
    start = BiEncoder.from_pretrained(tiny_encoder_dir)

    def moved(scale):
        ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{
            "paths.kb": str(kb_file), "paths.kb_format": "jsonl", "training.max_steps": 3, "training.warmup": 0.0,
            "training.train_entity_encoder": True, "training.eval_kb_sample": 2, "negatives.kind": "shared",
            "negatives.count": 2, "negatives.hard_fraction": 0.0, "loss.name": "ce_cosine",
            "training.entity_lr_scale": scale, "training.eval_every": 100})
        train(CONFIG, tmp_path / f"run{scale}", ov, progress=False)
        last = BiEncoder.from_pretrained(tmp_path / f"run{scale}" / "last" / "encoder")

        def delta(a, b):
            return sum(float((p - q).abs().sum()) for p, q in zip(a.parameters(), b.parameters()))
        return delta(last.entity_model, start.entity_model), delta(last.mention_model, start.mention_model)

    (e_full, m_full), (e_slow, m_slow) = moved(1.0), moved(0.01)
    assert e_slow < 0.2 * e_full
    assert m_slow > 0.3 * m_full


def test_entity_lr_scale_needs_a_trained_entity_tower(corpus, kb_dir, tiny_encoder_dir, tmp_path):  # noqa: F811
    for extra in ({"training.entity_lr_scale": 0.5}, {"training.entity_lr_scale": 0.0, "training.train_entity_encoder": True}):
        with pytest.raises(ConfigError, match="entity_lr_scale"):
            train(CONFIG, tmp_path / "run", overrides(corpus, kb_dir, tiny_encoder_dir, **extra), progress=False)
