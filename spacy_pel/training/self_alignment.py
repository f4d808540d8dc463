"""KB self-alignment in the retriever's own formats (``python -m spacy_pel adapt``, the default objective).

Both towers learn the KB's synonyms as the retriever will use them: a synonym as a marked mention
(mention tower, span pooled) against its entity's KB row (entity tower), with the shared negatives of
mention training -- every row of the batch scored by every synonym, half of the sampled ones hard,
from a pool of entities re-encoded every ``negatives.refresh_every`` steps (:mod:`.synonyms`,
:mod:`.retriever`'s synonym stage). No annotated text is needed: entities held out of training
select the model by their synonyms' recall@1.

The run is :func:`~spacy_pel.training.retriever.run_retriever` over a retriever config
(``configs/adapt.cfg``; ``None``: :data:`DEFAULTS`) with the KB as ``paths.kb`` and no corpus. Its
resumable state is ``ENCODER.work/``, kept only when the KB file's content (and a training corpus's)
and the settings are the ones it was made from; the best encoder is written to ``ENCODER`` at the end.

Started from an encoder this package saved (a trained retriever: ``--encoder
PIPELINE/pel_linker/encoder``), the run continues that encoder in its own input formats: its word-piece
lengths, pooling and entity text (``entity_text``) are kept unless the command line sets them. That is how a trained pipeline is
taught a KB it was not trained on before linking against it (:mod:`spacy_pel.pipeline.retarget`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from confection import Config

from ..models.encoder import CONFIG_FILE
from .adapt import WORK_SUFFIX, files_sha256, kb_stamp, nested, prepare_work, publish
from .config import PathLike, RetrieverConfig
from .retriever import run_retriever
from .run_config import load_config

# the settings of configs/adapt.cfg, for a user without the repository's configs
DEFAULTS: Dict[str, Any] = {
    "paths.train": None, "paths.dev": None, "paths.kb_format": "jsonl",
    "encoder.base": "all-MiniLM-L6-v2", "encoder.mention_max_length": 32, "encoder.entity_max_length": 32,
    "encoder.mention_pooling": "span",
    "loss.name": "ce_cosine", "loss.scale": 20.0,
    "negatives.kind": "shared", "negatives.count": 4, "negatives.hard_fraction": 0.5,
    "negatives.refresh_every": 100, "negatives.pool": 20000,
    "synonyms.steps": 1000, "synonyms.pairs": 0, "synonyms.eval_entities": 1000, "synonyms.replay": 0.0,
    "training.train_entity_encoder": True, "training.precision": "auto", "training.batch_size": 32,
    "training.lr": 5e-5, "training.warmup": 0.1, "training.eval_every": 250, "training.eval_kb_sample": 5000,
}
# the input settings a saved start encoder keeps (unless the command line sets them)
KEPT = ("mention_max_length", "entity_max_length", "mention_pooling", "entity_text")
# settings that do not change what a resumed run computes
UNSTAMPED = ("max_minutes", "resume", "device", "eval_every")


def retriever_adapt_config(config: Optional[PathLike], overrides: Optional[Mapping[str, Any]] = None) -> Config:
    """The raw config of a run: the file ``config`` (or :data:`DEFAULTS`) with ``overrides``."""
    if config is not None:
        return load_config(config, overrides)
    return Config(nested({**DEFAULTS, **dict(overrides or {})}))


def kept_settings(base: str) -> Dict[str, Any]:
    """The input settings of a start encoder this package saved, as overrides (none for a model name)."""
    path = Path(str(base)) / CONFIG_FILE
    if not path.exists():
        return {}
    saved = json.loads(path.read_text(encoding="utf8"))
    return {f"encoder.{key}": saved[key] for key in KEPT if key in saved}


def adapt_retriever(config: Optional[PathLike], output: PathLike, overrides: Optional[Mapping[str, Any]] = None,
                    progress: bool = True) -> Dict[str, Any]:
    """Self-align in the retriever's formats as ``config`` + ``overrides`` say (``paths.kb`` and
    ``paths.kb_format`` name the KB file); write the encoder to ``output``. Returns the loop's state.
    A saved start encoder keeps its input settings unless ``overrides`` set them (see the module doc)."""
    base = retriever_adapt_config(config, overrides)["encoder"]["base"]
    overrides = {**kept_settings(base), **dict(overrides or {})}
    raw = retriever_adapt_config(config, overrides)
    cfg = RetrieverConfig.from_config(raw, str(config or "adapt settings"))
    output = Path(output)
    work = output.with_name(output.name + WORK_SUFFIX)
    settings = {section: dict(values) for section, values in raw.items()}
    for key in UNSTAMPED:
        settings.get("training", {}).pop(key, None)
    stamp = kb_stamp(cfg.paths.kb, cfg.paths.kb_format, settings)
    if cfg.paths.train and Path(cfg.paths.train).is_file():  # a replayed corpus (synonyms.replay) or a mention stage: its content counts too
        stamp["train_sha256"] = files_sha256([Path(cfg.paths.train)])
    prepare_work(work, stamp, cfg.training.resume)
    raw.to_disk(work / "config.cfg")
    state = run_retriever(cfg, work, progress)
    publish(work, output, state)
    return state
