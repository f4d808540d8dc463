"""The retriever's training batches: :class:`Examples` (encoded mention inputs and their gold KB
rows), :class:`Stage` (a run of batches over them: the synonym stage, the mention stage) and
:class:`Batch` (one step's share). A stage's batches are the same for a seed however often a run
resumes; ``[synonyms] replay`` (:func:`replaying`) ends each synonym batch with mentions of the
training corpus.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Set, Tuple

import numpy as np

from ..files import InputError


@dataclass
class Examples:
    """Training examples: encoded mention inputs and the KB rows that are gold for each."""

    inputs: List[Tuple[List[int], Tuple[int, int]]]
    gold: List[Set[int]]

    def __len__(self) -> int:
        return len(self.gold)

    def subset(self, idx) -> "Examples":
        return Examples([self.inputs[i] for i in idx], [self.gold[i] for i in idx])

    def __add__(self, other: "Examples") -> "Examples":
        return Examples(self.inputs + other.inputs, self.gold + other.gold)


def cycled(n: int, per_step: int, step: int, seed: int) -> np.ndarray:
    """Step ``step``'s ``per_step`` indices of ``range(n)``, taken in a shuffled order that is drawn
    again (from ``seed`` and the pass) at each pass over them."""
    per_epoch = max(1, math.ceil(n / per_step))
    epoch, offset = divmod(step, per_epoch)
    order = np.random.default_rng(seed + 1000 * epoch).permutation(n)
    return order[offset * per_step : (offset + 1) * per_step]


@dataclass
class Stage:
    """A run of ``steps`` batches of ``examples``; with ``replayed`` examples after its own (the
    training mentions of ``[synonyms] replay``), each batch ends with ``replay_per_batch`` of those."""

    name: str  # "synonyms" or "mentions"
    examples: Examples
    steps: int
    replayed: int = 0
    replay_per_batch: int = 0

    def batch(self, step: int, batch_size: int, seed: int) -> np.ndarray:
        """The example indices of the stage's ``step``-th batch, the same for a seed."""
        own = len(self.examples) - self.replayed
        seed += len(self.name)
        idx = cycled(own, batch_size - self.replay_per_batch, step, seed)
        if not self.replay_per_batch:
            return idx
        return np.concatenate([idx, own + cycled(self.replayed, self.replay_per_batch, step, seed + 7)])


@dataclass
class Batch:
    stage: str
    idx: np.ndarray  # example indices within the stage
    examples: Examples


def replaying(stage: Stage, mentions: Examples, share: float, batch_size: int) -> Stage:
    """``stage`` with ``mentions`` replayed: ``share`` of each batch (at least one mention)."""
    if not len(mentions):
        raise InputError("synonyms.replay: no mention of paths.train is linked to an entity of the KB (a KB of other "
                         "ids, e.g. an ontology: adapt without replay, --synonyms.replay 0; the transfer workflow's "
                         "--vars.transfer_replay 0)")
    per_batch = min(batch_size - 1, max(1, round(share * batch_size)))
    return Stage(stage.name, stage.examples + mentions, stage.steps, len(mentions), per_batch)
