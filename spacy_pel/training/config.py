"""Typed training settings, read from the confection ``.cfg`` files in ``configs/``.

A config file's sections (``[paths]``, ``[encoder]``, ``[loss]``, ``[negatives]``, ``[training]`` …)
become the dataclasses below; ``--section.key value`` overrides on the command line (spaCy's
parser) are applied by confection before parsing. Every key is checked: an unknown section or key,
a value of the wrong type or outside its range raises :class:`ConfigError` naming the file, the
section and the key.

* :class:`RetrieverConfig` -- ``configs/train_pb_random.cfg`` (:mod:`spacy_pel.training.retriever`);
* :class:`JointConfig` -- ``configs/train_e2e.cfg`` (:mod:`spacy_pel.training.joint`);
* :class:`LoopSettings` -- what the loop itself reads (schedule, clipping, evaluation, resume); the
  ``[training]`` sections extend it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Type, TypeVar, Union, get_args, get_origin, get_type_hints

from ..files import InputError
from ..models.encoder import EncoderConfig
from ..models.linking import ENTITY_SPACES
from ..models.losses import LOSSES, Loss, make_loss
from ..models.precision import device_problem

T = TypeVar("T")
PathLike = Union[str, Path]
PRECISIONS = ("fp32", "bf16", "auto")  # auto: bf16 where the CPU/GPU has bf16 units
SCHEDULES = ("linear", "constant")
OBJECTIVES = ("linking", "arborescence")
MENTION_SPACES = ("raw", "batch_centred")
NEGATIVE_KINDS = ("sampled", "in_batch", "kb", "shared")  # "kb": softmax over every KB row (frozen tower only)


class ConfigError(InputError):
    """A bad training config: unknown section or key, wrong type, or a value out of range."""


def check(ok: bool, where: str, message: str) -> None:
    """A :class:`ConfigError` ``where: message`` unless ``ok`` (every config module's checks use it)."""
    if not ok:
        raise ConfigError(f"{where}: {message}")


def one_of(value: str, choices, where: str) -> None:
    """A :class:`ConfigError` unless ``value`` is one of ``choices``."""
    check(value in choices, where, f"must be one of {', '.join(map(repr, choices))}, not {value!r}")


# ------------------------------------------------------------------ sections
@dataclass
class PathsSection:
    train: Optional[str] = None
    dev: Optional[str] = None
    kb: Optional[str] = None
    # set: ``kb`` is a KB file of this format (as build-kb reads it), not a KB folder -- entity records
    # without stored vectors, for a trained entity tower whose KB is encoded once, after training
    kb_format: Optional[str] = None


@dataclass
class EncoderSection:
    """``base`` (Hugging Face name or encoder folder) and :class:`EncoderConfig` fields to override."""

    base: str = "all-MiniLM-L6-v2"
    overrides: Dict[str, Any] = field(default_factory=dict)


@dataclass
class LossSection:
    """``name`` (a key of :data:`~spacy_pel.models.losses.LOSSES`) and numeric settings; settings of
    other losses are allowed and ignored, so one file serves every loss."""

    name: str = "proxy"
    settings: Dict[str, float] = field(default_factory=dict)

    def build(self) -> Loss:
        return make_loss(self.name, **{k: v for k, v in self.settings.items() if k in LOSSES[self.name].defaults})


@dataclass
class NegativesSection:
    kind: str = "sampled"
    count: int = 32
    hard_fraction: float = 0.0


@dataclass
class RetrieverNegatives(NegativesSection):
    # trained entity tower only: re-encode the hard-negative pool every N steps (pool 0 = whole KB)
    refresh_every: int = 200
    pool: int = 20000


@dataclass
class FgsmSection:
    enabled: bool = False
    epsilon: float = 0.01
    weight: float = 1.0
    negatives: int = 0  # how many of each mention's negatives get an adversarial copy (0 = all)
    mentions: int = 0  # how many of each batch's mentions get the adversarial term (0 = all)


@dataclass
class SynonymsSection:
    steps: int = 0
    pairs: int = 50000
    # without a dev corpus (paths.dev = null): entities held out of the synonym stage, whose synonyms
    # select the model (each its entity among them and training.eval_kb_sample random KB entities)
    eval_entities: int = 1000
    # share of each synonym batch given to paths.train's mentions, replayed (training/stages.py; epochs 0: no mention stage)
    replay: float = 0.0


@dataclass
class AugmentSection:
    # copies of this share of the training mentions with their words replaced by a name of a random KB
    # entity of a gold type, in the same context (spacy_pel.training.entity_swaps; 0 = none, 1 = one each)
    entity_swaps: float = 0.0
    name_pairs: float = 0.0  # weight of training/name_pairs.py's loss (trained entity tower; 0 = off)
    # share of each mention batch encoded without its context (training/context_dropout.py; 0 = off)
    context_dropout: float = 0.0


@dataclass
class ArborescenceSection:
    refresh_every: int = 60
    max_cluster: int = 32


@dataclass
class SpansSection:
    max_len: int = 10
    weight: float = 1.0
    kind: str = "span"  # "span": a logit per enumerated span (BCE); "bio": O/B/I token tags (CE)
    pooling: str = "mean"  # a token's vector from its word pieces: "mean" or "first"
    labels: bool = True  # train a label head on the corpus's span labels (Chemical, Disease)
    label_weight: float = 1.0


@dataclass
class LoopSettings:
    """What :class:`~spacy_pel.training.loop.TrainingLoop` reads: the learning-rate schedule
    (``linear``: warm-up over ``warmup`` × steps, then linear decay to 0; ``constant``), gradient
    clipping (0 = none), evaluation every ``eval_every`` steps (at least 1), early stopping after
    ``patience`` evaluations in a row without a new best (0 = never), bf16 autocast and resuming from
    ``DIR/last``."""

    warmup: float = 0.0
    schedule: str = "linear"
    grad_clip: float = 1.0
    eval_every: int = 0
    patience: int = 0
    precision: str = "fp32"
    resume: bool = True


@dataclass
class TrainingSection(LoopSettings):
    seed: int = 0
    device: str = "auto"
    lr: float = 2e-5
    weight_decay: float = 0.01
    epochs: float = 1.0
    max_steps: int = 0  # 0 = epochs decide
    eval_docs: int = 100  # dev docs used for model selection (0 = all)


@dataclass
class RetrieverTraining(TrainingSection):
    batch_size: int = 32
    train_entity_encoder: bool = False
    # trained entity tower only: its learning rate is lr x this (a slower tower drifts less from the
    # base's view of the KB's untrained entities)
    entity_lr_scale: float = 1.0
    objective: str = "linking"
    eval_kb_sample: int = 20000
    # "raw": the KB's vectors as stored; "centred": normalize(e - μ_KB), frozen entity tower only
    entity_space: str = "raw"
    # "raw", or "batch_centred": each batch's mean unit mention vector subtracted (cosine losses)
    mention_space: str = "raw"
    # stop after this many minutes of training, counted over resumed runs too (0 = no limit)
    max_minutes: float = 0.0


@dataclass
class JointTraining(TrainingSection):
    batch_docs: int = 4
    scorer_lr: float = 0.003
    link_weight: float = 1.0  # weight of the linking loss (0: the transformer learns spans only)
    select: str = "strict"  # what picks DIR/best: "strict" end-to-end F1 or "span" F1 on the dev docs


# ------------------------------------------------------------------ parsing
def coerce(value: Any, kind: Any, where: str) -> Any:
    """``value`` as type ``kind`` (bool, int, float, str, Optional[...]) or a ConfigError."""
    if get_origin(kind) is Union:
        options = [a for a in get_args(kind) if a is not type(None)]
        return None if value is None else coerce(value, options[0], where)
    if kind is bool:
        check(isinstance(value, bool), where, f"expected true or false, got {value!r}")
        return value
    if kind is int:
        integral = isinstance(value, float) and value.is_integer()
        check((isinstance(value, int) and not isinstance(value, bool)) or integral, where,
              f"expected an integer, got {value!r}")
        return int(value)
    if kind is float:
        check(isinstance(value, (int, float)) and not isinstance(value, bool), where, f"expected a number, got {value!r}")
        check(math.isfinite(value), where, f"expected a finite number, got {value!r}")
        return float(value)
    if kind is str:
        check(isinstance(value, (str, Path)), where, f"expected a string, got {value!r}")
        return str(value)
    return value


def parse_section(cls: Type[T], values: Mapping[str, Any], where: str) -> T:
    """Build the dataclass ``cls`` from one config section, type-checking every key."""
    check(isinstance(values, Mapping), where, f"expected a section, got {values!r}")
    if cls is EncoderSection:
        known = {f.name for f in fields(EncoderConfig)} - {"extra"}
        unknown = sorted(set(values) - known)
        check(not unknown, where, f"unknown key(s) {unknown}; known: {sorted(known)}")
        check("base" in values, where, "missing key 'base'")
        base = coerce(values["base"], str, f"{where} base")
        hints = get_type_hints(EncoderConfig)
        overrides = {k: coerce(v, hints[k], f"{where} {k}") for k, v in values.items() if k != "base"}
        try:
            EncoderConfig(base=base, **overrides)
        except ValueError as err:
            raise ConfigError(f"{where}: {err}") from None
        return EncoderSection(base, overrides)
    if cls is LossSection:
        known = {k for spec in LOSSES.values() for k in spec.defaults}
        unknown = sorted(set(values) - known - {"name"})
        check(not unknown, where, f"unknown key(s) {unknown}; known: {sorted(known | {'name'})}")
        name = coerce(values.get("name", "proxy"), str, f"{where} name")
        one_of(name, sorted(LOSSES), f"{where} name")
        settings = {k: coerce(v, float, f"{where} {k}") for k, v in values.items() if k != "name"}
        return LossSection(name, settings)
    hints = get_type_hints(cls)
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(values) - set(known))
    check(not unknown, where, f"unknown key(s) {unknown}; known: {known}")
    return cls(**{k: coerce(v, hints[k], f"{where} {k}") for k, v in values.items()})


def parse_config(cls: Type[T], cfg: Mapping[str, Any], source: str) -> T:
    """The dataclass ``cls`` of sections from a whole config; an unknown section is a :class:`ConfigError`."""
    hints = get_type_hints(cls)
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(cfg) - set(known))
    check(not unknown, source, f"unknown section(s) {unknown}; known: {known}")
    sections = {k: parse_section(hints[k], cfg[k], f"{source} [{k}]") for k in known if k in cfg}
    return cls(**sections)


def check_device(device: str, where: str) -> None:
    """A :class:`ConfigError` unless torch can run on ``device`` on this machine (:func:`device_problem`)."""
    problem = device_problem(device)
    check(problem is None, where, problem or "")


def check_schedule(t, where: str) -> None:
    """The settings every training loop has (the retriever's, the joint model's and adapt's), its seed
    and device included."""
    check_device(t.device, f"{where} device")
    one_of(t.precision, PRECISIONS, f"{where} precision")
    one_of(t.schedule, SCHEDULES, f"{where} schedule")
    check(0.0 <= t.warmup <= 1.0, f"{where} warmup", f"must be within [0, 1], not {t.warmup}")
    check(t.eval_every >= 1, f"{where} eval_every", f"must be at least 1, not {t.eval_every}")
    for key in ("max_steps", "lr", "grad_clip", "weight_decay", "patience", "seed"):
        check(getattr(t, key) >= 0, f"{where} {key}", f"must be >= 0, not {getattr(t, key)}")


def _check_loop(t: TrainingSection, where: str) -> None:
    """A corpus loop's settings: the schedule's, plus its epochs and dev documents."""
    check_schedule(t, where)
    for key in ("eval_docs", "epochs"):
        check(getattr(t, key) >= 0, f"{where} {key}", f"must be >= 0, not {getattr(t, key)}")


def _check_negatives(n: NegativesSection, kinds, where: str) -> None:
    one_of(n.kind, kinds, f"{where} kind")
    check(n.count >= 0, f"{where} count", f"must be >= 0, not {n.count}")
    check(0.0 <= n.hard_fraction <= 1.0, f"{where} hard_fraction", f"must be within [0, 1], not {n.hard_fraction}")


@dataclass
class RetrieverConfig:
    """``configs/train_pb_random.cfg``: the bi-encoder retriever."""

    paths: PathsSection = field(default_factory=PathsSection)
    encoder: EncoderSection = field(default_factory=EncoderSection)
    loss: LossSection = field(default_factory=LossSection)
    negatives: RetrieverNegatives = field(default_factory=RetrieverNegatives)
    fgsm: FgsmSection = field(default_factory=FgsmSection)
    synonyms: SynonymsSection = field(default_factory=SynonymsSection)
    training: RetrieverTraining = field(default_factory=RetrieverTraining)
    arborescence: ArborescenceSection = field(default_factory=ArborescenceSection)
    augment: AugmentSection = field(default_factory=AugmentSection)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], source: str = "config") -> "RetrieverConfig":
        out = parse_config(cls, cfg, source)
        t, n = out.training, out.negatives
        _check_loop(t, f"{source} [training]")
        _check_negatives(n, NEGATIVE_KINDS, f"{source} [negatives]")
        one_of(t.objective, OBJECTIVES, f"{source} [training] objective")
        one_of(t.entity_space, ENTITY_SPACES, f"{source} [training] entity_space")
        if t.entity_space != "raw" and t.train_entity_encoder:
            raise ConfigError(f'{source}: training.entity_space = "{t.entity_space}" transforms the stored KB vectors '
                              "and needs a frozen entity tower (training.train_entity_encoder = false)")
        one_of(t.mention_space, MENTION_SPACES, f"{source} [training] mention_space")
        if t.mention_space != "raw" and (LOSSES[out.loss.name].kind != "cosine" or t.train_entity_encoder
                                         or t.objective != "linking"):
            raise ConfigError(f'{source}: training.mention_space = "{t.mention_space}" needs a cosine loss, a frozen '
                              "entity tower and the linking objective")
        check(out.fgsm.mentions >= 0, f"{source} [fgsm] mentions", f"must be >= 0, not {out.fgsm.mentions}")
        check(t.batch_size >= 1, f"{source} [training] batch_size", f"must be at least 1, not {t.batch_size}")
        for where, value in (("augment] entity_swaps", out.augment.entity_swaps), ("augment] name_pairs", out.augment.name_pairs),
                             ("synonyms] eval_entities", out.synonyms.eval_entities), ("training] max_minutes", t.max_minutes),
                             ("training] eval_kb_sample", t.eval_kb_sample), ("negatives] pool", n.pool),
                             ("negatives] refresh_every", n.refresh_every)):
            check(value >= 0, f"{source} [{where}", f"must be >= 0, not {value}")
        check(out.synonyms.steps >= 0 and out.synonyms.pairs >= 0, f"{source} [synonyms]",
              f"steps and pairs (0 = every pair) must be >= 0, not {out.synonyms.steps} and {out.synonyms.pairs}")
        a = out.arborescence
        check(a.refresh_every >= 1 and a.max_cluster >= 1, f"{source} [arborescence]",
              f"refresh_every and max_cluster must be at least 1, not {a.refresh_every} and {a.max_cluster}")
        c = out.augment.context_dropout
        check(0.0 <= c <= 1.0, f"{source} [augment] context_dropout", f"must be within [0, 1], not {c}")
        r = out.synonyms.replay
        check(0.0 <= r < 1.0 and (not r or (bool(out.paths.train) and out.synonyms.steps > 0)), f"{source} [synonyms] replay",
              f"{r}: needs paths.train (the corpus replayed), synonyms.steps > 0 and a share within [0, 1)")
        check(bool(out.paths.train) or out.synonyms.steps > 0, f"{source} [paths] train",
              "a training corpus is needed unless synonyms.steps > 0 (KB synonyms alone)")
        check(out.paths.kb is not None, f"{source} [paths] kb", "a KB folder is needed")
        if out.paths.kb_format is not None and not (t.train_entity_encoder and (n.refresh_every or not n.hard_fraction)):
            raise ConfigError(f"{source}: paths.kb_format (a KB file without vectors) needs a trained entity tower "
                              "(training.train_entity_encoder = true) whose hard negatives are refreshed "
                              "(negatives.refresh_every > 0) or none (negatives.hard_fraction = 0)")
        if t.entity_lr_scale <= 0 or ((t.entity_lr_scale != 1.0 or out.augment.name_pairs) and not t.train_entity_encoder):
            raise ConfigError(f"{source}: training.entity_lr_scale must be > 0; it (other than 1) and augment.name_pairs "
                              "need a trained entity tower (training.train_entity_encoder = true)")
        if n.kind == "kb" and t.train_entity_encoder:
            raise ConfigError(f'{source}: negatives.kind = "kb" (softmax over the whole KB) needs a frozen entity tower '
                              "(training.train_entity_encoder = false)")
        return out


@dataclass
class JointConfig:
    """``configs/train_e2e.cfg``: the joint end-to-end model (span scorer + linking)."""

    paths: PathsSection = field(default_factory=PathsSection)
    encoder: EncoderSection = field(default_factory=EncoderSection)
    loss: LossSection = field(default_factory=lambda: LossSection("ce"))
    negatives: NegativesSection = field(default_factory=lambda: NegativesSection("kb", 32, 0.5))
    spans: SpansSection = field(default_factory=SpansSection)
    training: JointTraining = field(default_factory=JointTraining)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], source: str = "config") -> "JointConfig":
        out = parse_config(cls, cfg, source)
        _check_loop(out.training, f"{source} [training]")
        _check_negatives(out.negatives, ("sampled", "kb"), f"{source} [negatives]")
        check(out.training.batch_docs >= 1, f"{source} [training] batch_docs", "must be at least 1")
        check(out.spans.max_len >= 1, f"{source} [spans] max_len", "must be at least 1")
        one_of(out.training.select, ("strict", "span"), f"{source} [training] select")
        one_of(out.spans.kind, ("span", "bio"), f"{source} [spans] kind")
        one_of(out.spans.pooling, ("mean", "first"), f"{source} [spans] pooling")
        for where, value in (("[training] link_weight", out.training.link_weight), ("[spans] weight", out.spans.weight),
                             ("[spans] label_weight", out.spans.label_weight)):
            check(value >= 0, f"{source} {where}", "must be ≥ 0")
        for key in ("train", "kb"):
            check(getattr(out.paths, key) is not None, f"{source} [paths] {key}", "needed for end-to-end training")
        return out
