"""Typed config files of the re-ranker and the span scorer, and training from them.

``configs/train_reranker.cfg`` (:class:`RerankerFile`, :mod:`spacy_pel.training.reranker`) and
``configs/train_spans.cfg`` (:class:`SpanScorerFile`, :mod:`spacy_pel.training.span_scorer`) are read
as the retriever's and the joint model's are (:mod:`spacy_pel.training.config`): each section becomes a
dataclass, every key is checked — an unknown section or key, a value of the wrong type or out of
range raises :class:`~spacy_pel.training.config.ConfigError` naming the file, the section and the key
— and ``section.key`` overrides (the commands' flags, or ``--section.key value``) are applied before
parsing. Without a file the defaults below are read; they are the trainers' own defaults (and the
shipped files'). The resolved config is saved as ``OUTPUT/config.cfg``.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, TypeVar, Union

import spacy
from confection import Config

from ..corpora import read_docbin, require_gold_spans
from ..models.encoder import BiEncoder
from ..retrieval.build import load_encoder
from .config import ConfigError, check, parse_config
from .reranker import RerankerConfig, train_reranker
from .run_config import load_config, run_lock, save_run_config
from .span_scorer import train_span_scorer

T = TypeVar("T")
PathLike = Union[str, Path]
_R = RerankerConfig()
_SPANS = {k: p.default for k, p in inspect.signature(train_span_scorer).parameters.items()}


def read_config(cls: Type[T], config: Optional[PathLike] = None,
                overrides: Optional[Mapping[str, Any]] = None) -> Tuple[T, Config]:
    """``cls`` read from the file ``config`` (``None``: from ``cls``' defaults) with ``overrides``
    (``{"training.lr": 1e-4}``) applied; returns the typed config and the resolved raw one."""
    overrides = dict(overrides or {})
    if config is not None:
        raw = load_config(config, overrides)
        return cls.from_config(raw, str(config)), raw
    raw = Config({f.name: asdict(getattr(cls(), f.name)) for f in fields(cls)})
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        check(bool(name) and isinstance(raw.get(section, {}), dict), f"override {key!r}", "expected section.key")
        raw.setdefault(section, {})[name] = value
    return cls.from_config(raw, f"{cls.__name__} defaults"), raw


def _needed(paths: object, keys, where: str) -> None:
    for key in keys:
        check(bool(getattr(paths, key)), f"{where} [paths] {key}", "needed (in the file or as --" + key + ")")


# ------------------------------------------------------------------ the re-ranker
@dataclass
class RerankerPaths:
    encoder: Optional[str] = None  # the retriever (bi-encoder folder) whose candidates are re-ranked
    kb: Optional[str] = None  # KB folder built with that encoder
    train: Optional[str] = None  # training .spacy corpus with gold mentions and ids


@dataclass
class RerankerModel:
    base: str = _R.base  # a Hugging Face model or a saved cross-encoder folder to start from
    mention_max_length: int = _R.mention_max_length
    entity_max_length: int = _R.entity_max_length
    pooling: str = _R.pooling


@dataclass
class RerankerMining:
    candidates: int = _R.candidates  # retriever candidates per mention (gold forced in)
    mining_context: int = _R.mining_context
    mining_batch_size: int = _R.mining_batch_size


@dataclass
class RerankerTraining:
    lr: float = _R.lr
    weight_decay: float = _R.weight_decay
    batch_mentions: int = _R.batch_mentions
    max_steps: int = _R.max_steps
    warmup: float = _R.warmup
    hard_repeat: int = _R.hard_repeat
    held_out_docs: int = _R.held_out_docs
    eval_every: int = _R.eval_every
    seed: int = _R.seed
    retriever_weights: List[float] = field(default_factory=lambda: list(_R.retriever_weights))


@dataclass
class RerankerFile:
    """``configs/train_reranker.cfg``: the cross-encoder re-ranker (``train-reranker``)."""

    paths: RerankerPaths = field(default_factory=RerankerPaths)
    model: RerankerModel = field(default_factory=RerankerModel)
    mining: RerankerMining = field(default_factory=RerankerMining)
    training: RerankerTraining = field(default_factory=RerankerTraining)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], source: str = "config") -> "RerankerFile":
        out = parse_config(cls, cfg, source)
        weights = out.training.retriever_weights
        check(isinstance(weights, list) and all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights),
              f"{source} [training] retriever_weights", f"expected a list of numbers, got {weights!r}")
        out.training.retriever_weights = [float(w) for w in weights]
        try:
            out.settings()
        except ValueError as err:  # RerankerConfig's own checks, placed in their section
            named = re.search(r"`(\w+)`", str(err))
            key = named.group(1) if named else None
            section = next((f.name for f in fields(cls) if key in {g.name for g in fields(getattr(out, f.name))}), None)
            where = f"{source} [{section}] {key}" if section else source
            raise ConfigError(f"{where}: {str(err).removeprefix('reranker: ')}") from None
        _needed(out.paths, ("encoder", "kb", "train"), source)
        return out

    def settings(self) -> RerankerConfig:
        """The flat settings :func:`~spacy_pel.training.reranker.train_reranker` reads."""
        return RerankerConfig(**asdict(self.model), **asdict(self.mining), **asdict(self.training))


def train_reranker_from_config(cfg: RerankerFile, raw: Config, output: PathLike, progress: bool = True,
                               resume: bool = True) -> Dict[str, Any]:
    """:func:`~spacy_pel.training.reranker.train_reranker` with a read config (:func:`read_config`);
    ``raw`` is saved as ``output/config.cfg``; the output's lock is held throughout (:func:`~.run_config.run_lock`)."""
    with run_lock(output):
        save_run_config(raw, output)
        return train_reranker(cfg.settings(), cfg.paths.encoder, cfg.paths.kb, cfg.paths.train, output,
                              progress=progress, resume=resume)


# ------------------------------------------------------------------ the span scorer
@dataclass
class SpanPaths:
    encoder: Optional[str] = None  # encoder folder or name (its mention transformer gives the token vectors)
    train: Optional[str] = None  # training .spacy corpus with gold spans
    dev: Optional[str] = None  # dev .spacy corpus (for the threshold γ)


@dataclass
class SpanSettings:
    max_len: int = _SPANS["max_len"]  # longest span, in tokens (L)


@dataclass
class SpanTraining:
    epochs: int = _SPANS["epochs"]
    lr: float = _SPANS["lr"]  # Adam, constant
    seed: int = _SPANS["seed"]


@dataclass
class SpanScorerFile:
    """``configs/train_spans.cfg``: the span scorer on frozen token vectors (``train-spans``)."""

    paths: SpanPaths = field(default_factory=SpanPaths)
    spans: SpanSettings = field(default_factory=SpanSettings)
    training: SpanTraining = field(default_factory=SpanTraining)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], source: str = "config") -> "SpanScorerFile":
        out = parse_config(cls, cfg, source)
        check(out.spans.max_len >= 1, f"{source} [spans] max_len", f"must be at least 1, not {out.spans.max_len}")
        check(out.training.epochs >= 1, f"{source} [training] epochs", f"must be at least 1, not {out.training.epochs}")
        check(out.training.lr > 0, f"{source} [training] lr", f"must be > 0, not {out.training.lr}")
        check(out.training.seed >= 0, f"{source} [training] seed", f"must be >= 0, not {out.training.seed}")
        _needed(out.paths, ("encoder", "train", "dev"), source)
        return out


def train_spans_from_config(cfg: SpanScorerFile, raw: Config, output: PathLike, progress: bool = True,
                            resume: bool = False, encoder: Optional[BiEncoder] = None) -> Dict[str, Any]:
    """:func:`~spacy_pel.training.span_scorer.train_span_scorer` with a read config: the encoder
    (fp32, unless given already loaded) and both corpora loaded from ``[paths]``; ``raw`` is saved as
    ``output/config.cfg``; the output's lock is held throughout (:func:`~.run_config.run_lock`)."""
    with run_lock(output):
        nlp = spacy.blank("en")
        encoder = encoder if encoder is not None else load_encoder(cfg.paths.encoder, precision="fp32")
        train, dev = read_docbin(nlp, cfg.paths.train), read_docbin(nlp, cfg.paths.dev)
        require_gold_spans(cfg.paths.train, train, "the span scorer would learn nothing")
        require_gold_spans(cfg.paths.dev, dev, "the span scorer would pick its threshold on nothing")
        save_run_config(raw, output)
        t = cfg.training
        return train_span_scorer(encoder, train, dev, Path(output), cfg.spans.max_len, t.epochs, t.lr, t.seed,
                                 progress=progress, resume=resume)
