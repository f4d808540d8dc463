"""Issue 17: the centred entity space (proxy loss with a frozen entity tower) and FGSM on it."""
from pathlib import Path

import numpy as np
import pytest
import torch

from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.linking import centre_vectors, entity_centre
from spacy_pel.models.losses import make_loss
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.config import ConfigError, RetrieverConfig
from spacy_pel.training.fgsm import FGSM
from spacy_pel.training.retriever import CENTRE_FILE, centred_index, load_entity_centre, train
from spacy_pel.training.run_config import load_config

from .test_train import corpus, overrides  # noqa: F401

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "train_pb_centred.cfg"


def test_centring_removes_the_common_direction_numpy_and_torch_agree():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(500, 8)).astype(np.float32) + 3.0  # anisotropic: all cosines > 0
    mu = entity_centre(v, chunk=64)
    unit = v / np.linalg.norm(v, axis=1, keepdims=True)
    assert np.allclose(mu, unit.mean(0), atol=1e-5)
    c = centre_vectors(v, mu)
    assert np.allclose(np.linalg.norm(c, axis=1), 1, atol=1e-5)
    assert (unit @ unit.T).min() > 0 and (c @ c.T).min() < -0.5
    t = centre_vectors(torch.from_numpy(v), torch.from_numpy(mu)).numpy()
    assert np.allclose(t, c, atol=1e-5)


def test_centred_training_saves_the_centre_and_searches_the_centred_kb(corpus, kb_dir, tiny_encoder_dir, tmp_path):  # noqa: F811
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 4, "negatives.hard_fraction": 0.5,
                                                         "fgsm.enabled": True, "fgsm.negatives": 1, "fgsm.mentions": 2})
    state = train(CONFIG, tmp_path / "run", ov, progress=False)
    assert state["step"] == 4 and np.isfinite(state["history"][-1]["loss"])
    index = EntityIndex.from_disk(kb_dir)
    mu = load_entity_centre(tmp_path / "run" / "best")
    assert mu is not None and np.allclose(mu, entity_centre(index.embeddings))
    assert load_entity_centre(tiny_encoder_dir) is None
    centred = centred_index(index, mu)
    assert centred.fingerprint == index.fingerprint and len(centred) == len(index)
    assert np.allclose(centred.embeddings.astype(np.float32), centre_vectors(index.embeddings, mu), atol=2e-3)
    centred.check_encoder(BiEncoder.from_pretrained(tmp_path / "run" / "best"))  # the entity tower stayed frozen
    (tmp_path / "out").mkdir()
    centred.to_disk(tmp_path / "out" / "kb")  # a KB folder pel_linker reads unchanged
    assert (tmp_path / "run" / "best" / CENTRE_FILE).exists()


def test_centred_space_needs_a_frozen_tower_and_fgsm_mentions_is_checked(corpus, kb_dir, tiny_encoder_dir):  # noqa: F811
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"training.train_entity_encoder": True})
    with pytest.raises(ConfigError, match="frozen entity tower"):
        RetrieverConfig.from_config(load_config(CONFIG, ov))
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"training.entity_space": "whitened"})
    with pytest.raises(ConfigError, match="entity_space"):
        RetrieverConfig.from_config(load_config(CONFIG, ov))
    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"fgsm.mentions": -1})
    with pytest.raises(ConfigError, match="mentions"):
        RetrieverConfig.from_config(load_config(CONFIG, ov))


def test_fgsm_transform_and_mention_subset(tiny_encoder_dir, kb_dir):
    enc = BiEncoder.from_pretrained(tiny_encoder_dir)
    index = EntityIndex.from_disk(kb_dir)
    mu = torch.from_numpy(entity_centre(index.embeddings))
    loss = make_loss("proxy")
    m = torch.randn(4, enc.dim, requires_grad=True)
    rows = np.array([[1, 2], [0, 2], [3, 4], [1, 0]])
    mask = torch.ones(4, 2, dtype=torch.bool)
    seen = []

    def transform(v):
        seen.append(v.shape[0])
        return centre_vectors(v, mu)

    fgsm = FGSM(loss, enc, index.entities, epsilon=0.01, weight=1.0, negatives=1, transform=transform, mentions=2)
    out = fgsm(torch.tensor(0.0), m, [0, 1, 2, 3], rows, mask)
    assert torch.isfinite(out) and seen == [4, 4]  # 2 mentions × (1 positive + 1 negative), scored and returned
    out.backward()
    assert m.grad[:2].abs().sum() > 0 and m.grad[2:].abs().sum() == 0


def test_batch_centred_mentions_keep_a_running_mean_and_resume(corpus, kb_dir, tiny_encoder_dir, tmp_path):  # noqa: F811
    from spacy_pel.training.retriever import load_mention_centre

    ov = overrides(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 4, "training.mention_space": "batch_centred"})
    state = train(CONFIG, tmp_path / "run", ov, progress=False)
    assert state["step"] == 4 and np.isfinite(state["history"][-1]["loss"])
    mu_m = load_mention_centre(tmp_path / "run" / "best")
    assert mu_m is not None and mu_m.shape == (BiEncoder.from_pretrained(tiny_encoder_dir).dim,) and np.abs(mu_m).sum() > 0
    assert np.allclose(load_mention_centre(tmp_path / "run" / "last" / "encoder"), mu_m)
    state = train(CONFIG, tmp_path / "run", {**ov, "training.max_steps": 6}, progress=False)  # resumes with μ_m
    assert state["step"] == 6
    with pytest.raises(ConfigError, match="cosine loss"):
        RetrieverConfig.from_config(load_config(CONFIG, {**ov, "loss.name": "ce"}))
