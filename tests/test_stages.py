"""The retriever's batches (spacy_pel.training.stages): a stage's batches, and mentions replayed in them."""
import math

import numpy as np
import pytest

from spacy_pel.files import InputError
from spacy_pel.training.stages import Examples, Stage, replaying


def examples(n: int, offset: int = 0) -> Examples:
    return Examples([([offset + i], (0, 1)) for i in range(n)], [{offset + i} for i in range(n)])


def old_batch(n: int, bs: int, step: int, seed: int, name: str) -> np.ndarray:
    """The stage order before replay existed (the mention stage's batches must not move)."""
    epoch, offset = divmod(step, max(1, math.ceil(n / bs)))
    order = np.random.default_rng(seed + 1000 * epoch + len(name)).permutation(n)
    return order[offset * bs : (offset + 1) * bs]


def test_a_stage_without_replay_keeps_its_batches():
    stage = Stage("mentions", examples(23), 20)
    for step in range(20):
        assert np.array_equal(stage.batch(step, 4, seed=3), old_batch(23, 4, step, 3, "mentions"))


def test_replayed_mentions_end_every_batch_and_all_are_visited():
    stage = replaying(Stage("synonyms", examples(40), 30), examples(10, offset=100), share=0.25, batch_size=8)
    assert (stage.replayed, stage.replay_per_batch) == (10, 2)
    seen = set()
    for step in range(10):
        idx = stage.batch(step, 8, seed=0)
        assert all(i < 40 for i in idx[:-2]) and all(i >= 40 for i in idx[-2:])  # (a pass's last batch is short)
        seen.update(int(i) for i in idx[-2:])
    assert seen == set(range(40, 50))  # each pass visits every replayed mention
    gold = stage.examples.subset(stage.batch(0, 8, seed=0)).gold
    assert all(next(iter(g)) >= 100 for g in gold[6:])  # the replayed part is the corpus's examples
    assert np.array_equal(stage.batch(5, 8, seed=0), stage.batch(5, 8, seed=0))  # the same for a seed (resume)


def test_replay_needs_linked_mentions():
    with pytest.raises(InputError, match="no mention of paths.train"):
        replaying(Stage("synonyms", examples(4), 3), examples(0), share=0.5, batch_size=4)
