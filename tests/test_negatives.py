"""Negative sampling: random, in-batch and mixed hard/random; gold rows never come back."""
import numpy as np
import pytest

from spacy_pel.models import top_k
from spacy_pel.models.negatives import (
    HardNegativeMiner,
    RandomNegatives,
    in_batch,
    sample_excluding,
)


def _random_golds(rng, batch, n_entities):
    """Gold sets of 1-3 rows (composite mentions have several)."""
    return [set(rng.choice(n_entities, size=rng.integers(1, 4), replace=False).tolist()) for _ in range(batch)]


def _assert_clean(out, golds, k, n_entities, distinct=True):
    assert out.shape == (len(golds), k) and out.dtype == np.int64
    assert out.min() >= 0 and out.max() < n_entities
    for row, gold in zip(out, golds):
        assert not gold & set(row.tolist())
        if distinct:
            assert len(set(row.tolist())) == k


def test_random_negatives_never_gold():
    rng = np.random.default_rng(0)
    sampler = RandomNegatives(n_entities=60, k=12, seed=1)
    seen = np.zeros(60, dtype=int)
    for _ in range(300):
        golds = _random_golds(rng, 16, 60)
        out = sampler.sample(golds)
        _assert_clean(out, golds, 12, 60)
        np.add.at(seen, out.ravel(), 1)
    # roughly uniform: 300·16·12 draws over 60 rows, ~960 each
    assert seen.min() > 700 and seen.max() < 1250


def test_random_negatives_small_kb():
    # 4 allowed rows for k = 4: exactly those, in some order
    out = RandomNegatives(6, 4, seed=0).sample([{0, 1}, {5, 2}])
    assert sorted(out[0].tolist()) == [2, 3, 4, 5] and sorted(out[1].tolist()) == [0, 1, 3, 4]
    # fewer allowed rows than k: repeats, but every allowed row and never a gold one
    out = RandomNegatives(5, 8, seed=0).sample([{0}])
    assert set(out[0].tolist()) == {1, 2, 3, 4}
    with pytest.raises(ValueError, match="every one"):
        RandomNegatives(3, 2).sample([{0, 1, 2}])
    with pytest.raises(ValueError, match="outside"):
        RandomNegatives(3, 2).sample([{7}])


def test_sample_excluding_extra_rows():
    rng = np.random.default_rng(0)
    forbidden = [set(range(0, 90)), set(range(10, 100))]
    out = sample_excluding(rng, 100, 10, forbidden)
    assert sorted(out[0].tolist()) == list(range(90, 100))
    assert sorted(out[1].tolist()) == list(range(10))


def test_in_batch_mask():
    golds = [{3}, {5, 7}, {3}, {7, 9}]  # mention 1 and 3 are composite
    rows, mask = in_batch(golds, [3, 5, 3, 7])
    assert rows.tolist() == [[5, 3, 7], [3, 3, 7], [3, 5, 7], [3, 5, 3]]
    assert mask.tolist() == [
        [True, False, True],  # 3 is mention 0's own entity
        [True, False, False],  # second 3 repeats; 7 is a composite partner
        [False, True, True],
        [True, True, False],  # second 3 repeats
    ]
    _, mask = in_batch(golds, [3, 5, 3, 7], dedupe=False)
    assert mask[1].tolist() == [True, True, False]
    rows, mask = in_batch([{1}], [1])
    assert rows.shape == (1, 0) and mask.shape == (1, 0)


def _fan(n=20):
    """Unit vectors at angles 0, 0.1, 0.2, … : against the query (1, 0) the score falls with the row."""
    angles = np.arange(n) * 0.1
    return np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


def test_hard_negatives_are_top_non_gold():
    miner = HardNegativeMiner(k=6, hard_fraction=0.5, seed=0)
    miner.refresh(_fan())
    query = np.array([[1.0, 0.0], [np.cos(1.03), np.sin(1.03)]], dtype=np.float32)  # near rows 0 and 10
    golds = [{0, 2}, {10}]
    hard, real = miner.hard(query, golds, 3)
    assert real.all()
    assert hard[0].tolist() == [1, 3, 4]
    assert hard[1].tolist() == [11, 9, 12]
    for _ in range(50):
        out = miner.sample(query, golds)
        _assert_clean(out, golds, 6, 20)
        assert out[0, :3].tolist() == [1, 3, 4]  # hard_fraction 0.5 of k = 6: three hard, three random
        assert not {1, 3, 4} & set(out[0, 3:].tolist())


def test_hard_fraction_split_and_rounding():
    assert HardNegativeMiner(k=32).n_hard == 16
    assert HardNegativeMiner(k=5, hard_fraction=0.5).n_hard == 3
    assert HardNegativeMiner(k=10, hard_fraction=0.0).n_hard == 0
    assert HardNegativeMiner(k=10, hard_fraction=1.0).n_hard == 10


def test_hard_fraction_zero_and_before_refresh_are_random():
    query = np.array([[1.0, 0.0]], dtype=np.float32)
    golds = [{0}]
    miner = HardNegativeMiner(k=4, hard_fraction=0.0, seed=0)
    miner.refresh(_fan())
    firsts = {tuple(miner.sample(query, golds)[0].tolist()) for _ in range(20)}
    assert len(firsts) > 10
    early = HardNegativeMiner(k=4, seed=0, n_entities=20)
    outs = [early.sample(None, golds) for _ in range(20)]
    for out in outs:
        _assert_clean(out, golds, 4, 20)
    assert len({tuple(o[0].tolist()) for o in outs}) > 10
    with pytest.raises(RuntimeError, match="n_entities"):
        HardNegativeMiner(k=4).sample(query, golds)
    with pytest.raises(ValueError, match="KB of"):
        early.refresh(_fan(7))


def test_hard_miner_many_draws_never_gold():
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(80, 8)).astype(np.float32)
    miner = HardNegativeMiner(k=10, hard_fraction=0.5, seed=4)
    miner.refresh(vectors)
    for _ in range(100):
        golds = _random_golds(rng, 8, 80)
        # queries that sit on their golds make the golds the top hits to skip
        query = np.stack([vectors[sorted(g)].sum(0) for g in golds])
        out = miner.sample(query, golds)
        _assert_clean(out, golds, 10, 80)


def test_hard_miner_tiny_kb():
    miner = HardNegativeMiner(k=6, hard_fraction=0.5, seed=0)
    miner.refresh(_fan(4))
    out = miner.sample(np.array([[1.0, 0.0]], dtype=np.float32), [{0, 1}])
    _assert_clean(out, [{0, 1}], 6, 4, distinct=False)
    assert out[0, :2].tolist() == [2, 3]


def test_hard_search_over_query_chunks_equals_brute_force(monkeypatch):
    """More queries than one search block: every line gets its own top rows, in score order."""
    monkeypatch.setattr(top_k, "SCORES_PER_CALL", 300 * 64)  # blocks of 64 queries over 300 rows
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(300, 16)).astype(np.float32)
    miner = HardNegativeMiner(k=8, hard_fraction=1.0, seed=0)
    miner.refresh(vectors)
    n_queries = 2 * 64 + 5
    query = rng.normal(size=(n_queries, 16)).astype(np.float32)
    golds = [{int(i % 300)} for i in range(n_queries)]
    hard, real = miner.hard(query, golds, 8)
    assert real.all()
    order = np.argsort(-(query @ vectors.T), axis=1, kind="stable")
    for line, gold in enumerate(golds):
        assert hard[line].tolist() == [r for r in order[line].tolist() if r not in gold][:8]
