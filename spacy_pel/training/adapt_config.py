"""Typed settings of KB self-alignment (``configs/adapt.cfg``, :mod:`spacy_pel.training.adapt`).

Sections: ``[kb]`` (the KB file and its format), ``[encoder]`` (the encoder to start from), ``[loss]``
(a pair loss of :data:`~spacy_pel.models.pair_losses.PAIR_LOSSES` and its settings), ``[negatives]``
(hard names mined from a pool of KB names, refreshed on a schedule) and ``[training]`` (the loop's
settings, the batch of entity pairs, the step and time budgets, the held-out synonym evaluation).
Parsed like the other training configs: unknown keys and bad values raise
:class:`~spacy_pel.training.config.ConfigError` naming the section and key.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping

from ..models.pair_losses import PAIR_LOSSES, make_pair_loss
from .config import ConfigError, LoopSettings, check, check_schedule, coerce, one_of, parse_config

ENTITY_WEIGHTS = ("names", "uniform")


@dataclass
class KBSection:
    path: str = ""
    format: str = "jsonl"


@dataclass
class AdaptEncoder:
    base: str = "all-MiniLM-L6-v2"
    # word pieces of a name input ([CLS] name [SEP]); SapBERT trains with 25
    max_length: int = 25


@dataclass
class PairLossSection:
    name: str = "multi_similarity"
    settings: Dict[str, float] = field(default_factory=dict)

    def build(self):
        return make_pair_loss(self.name, **self.settings)


@dataclass
class AdaptNegatives:
    # hard names added to each batch: for its anchors, the nearest names of other entities in a pool
    per_batch: int = 64
    # names in the pool (0 = every KB name), re-encoded every refresh_every steps (0 = only at start)
    pool: int = 50000
    refresh_every: int = 500


@dataclass
class AdaptTraining(LoopSettings):
    seed: int = 0
    device: str = "auto"
    lr: float = 2e-5
    weight_decay: float = 0.01
    # entities per batch, each with two of its names (a positive pair)
    batch_pairs: int = 64
    max_steps: int = 2000
    # stop after this many minutes of training, counted over resumed runs too (0 = no limit)
    max_minutes: float = 0.0
    # entities drawn by their number of names ("names") or all alike ("uniform")
    entity_weight: str = "names"
    # held out for evaluation: synonym → its entity among these entities' names and eval_pool others
    eval_every: int = 250
    eval_entities: int = 1000
    eval_pool: int = 20000


@dataclass
class AdaptConfig:
    kb: KBSection = field(default_factory=KBSection)
    encoder: AdaptEncoder = field(default_factory=AdaptEncoder)
    loss: PairLossSection = field(default_factory=PairLossSection)
    negatives: AdaptNegatives = field(default_factory=AdaptNegatives)
    training: AdaptTraining = field(default_factory=AdaptTraining)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], source: str = "config") -> "AdaptConfig":
        cfg = dict(cfg)
        loss = dict(cfg.pop("loss", {}) or {})
        out = parse_config(cls, cfg, source)
        out.loss = _parse_loss(loss, f"{source} [loss]")
        t, n = out.training, out.negatives
        check_schedule(t, f"{source} [training]")
        one_of(t.entity_weight, ENTITY_WEIGHTS, f"{source} [training] entity_weight")
        check(bool(out.kb.path), f"{source} [kb] path", "a KB file or folder is needed")
        for key in ("batch_pairs", "eval_entities"):
            check(getattr(t, key) >= 1, f"{source} [training] {key}", f"must be at least 1, not {getattr(t, key)}")
        check(t.eval_pool >= 0, f"{source} [training] eval_pool", f"must be >= 0, not {t.eval_pool}")
        check(t.max_minutes >= 0, f"{source} [training] max_minutes", f"must be >= 0, not {t.max_minutes}")
        for key in ("per_batch", "pool", "refresh_every"):
            check(getattr(n, key) >= 0, f"{source} [negatives] {key}", f"must be >= 0, not {getattr(n, key)}")
        check(out.encoder.max_length >= 4, f"{source} [encoder] max_length", "must be at least 4")
        return out


def _parse_loss(values: Mapping[str, Any], where: str) -> PairLossSection:
    name = coerce(values.get("name", "multi_similarity"), str, f"{where} name")
    one_of(name, sorted(PAIR_LOSSES), f"{where} name")
    known = {k for spec in PAIR_LOSSES.values() for k in spec.defaults}
    unknown = sorted(set(values) - known - {"name"})
    check(not unknown, where, f"unknown key(s) {unknown}; known: {sorted(known | {'name'})}")
    settings = {k: coerce(v, float, f"{where} {k}") for k, v in values.items()
                if k != "name" and k in PAIR_LOSSES[name].defaults}
    return PairLossSection(name, settings)


__all__ = ["AdaptConfig", "ConfigError", "ENTITY_WEIGHTS"]
