"""KB self-alignment in the retriever's own formats (``python -m spacy_pel adapt``, the default objective).

Both towers learn the KB's synonyms as the retriever will use them: a synonym as a marked mention
(mention tower, span pooled) against its entity's KB row (entity tower), with the shared negatives of
mention training -- every row of the batch scored by every synonym, half of the sampled ones hard,
from a pool of entities re-encoded every ``negatives.refresh_every`` steps (:mod:`.synonyms`,
:mod:`.retriever`'s synonym stage). No annotated text is needed: entities held out of training
select the model by their synonyms' recall@1.

The run is :func:`~spacy_pel.training.retriever.run_retriever` over a retriever config
(``configs/adapt.cfg``; ``None``: :data:`DEFAULTS`) with the KB as ``paths.kb`` and no corpus. Its
resumable state is ``ENCODER.work/``, kept only when the KB file's content (and a training corpus's),
the start encoder (a folder's files, or a model name) and the settings are the ones it was made from; the
best encoder is written to ``ENCODER`` at the end (with no held-out entity to choose by -- fewer than ten
with synonyms, or ``synonyms.eval_entities`` 0 -- the last step's). ``ENCODER`` must be new, empty or an
encoder folder (:func:`~.adapt.check_output`).

Started from an encoder this package saved (a trained retriever: ``--encoder
PIPELINE/pel_linker/encoder``), the run continues that encoder in its own input formats: its word-piece
lengths, pooling and entity text (``entity_text``) are kept unless the command line sets them. That is how a trained pipeline is
taught a KB it was not trained on before linking against it (:mod:`spacy_pel.pipeline.retarget`).

A run with nothing to train -- ``synonyms.steps`` 0 and no mention stage -- writes the start encoder as
it is (the transfer workflow's ``--vars.transfer_steps 0``: a KB linked with the pipeline's own encoder,
the plain route of ``docs/your-own-data.md``).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from confection import Config

from ..files import atomic_dir, file_digest, json_text
from ..models.encoder import CONFIG_FILE, BiEncoder
from ..models.saved_settings import SAVED_BEFORE
from .adapt import (
    LOG_FILE,
    UNSTAMPED,
    check_output,
    kb_stamp,
    nested,
    prepare_work,
    publish,
    start_encoder_identity,
    work_folder,
)
from .config import ConfigError, PathLike, RetrieverConfig, TrainingSection
from .retriever import run_retriever
from .run_config import load_config, run_lock

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
    saved = {**SAVED_BEFORE, **json.loads(path.read_text(encoding="utf8"))}  # a setting it lacks: what it did then
    return {f"encoder.{key}": saved[key] for key in KEPT if key in saved}


def nothing_to_train(raw: Config) -> bool:
    """No synonym step and no mention stage: ``synonyms.steps`` 0, and no ``paths.train`` or one read for
    its replay only (``training.epochs`` 0 and no ``max_steps``: the transfer workflow's corpus)."""
    synonyms, training, paths = raw.get("synonyms", {}), raw.get("training", {}), raw.get("paths", {})
    mention_steps = training.get("max_steps", 0) or training.get("epochs", TrainingSection.epochs)
    return not synonyms.get("steps", 1) and not (paths.get("train") and mention_steps)


def write_start_encoder(base: str, output: Path, raw: Config, overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """``base`` written to ``output`` unchanged (a run with nothing to train): an encoder folder this
    package saved is copied file for file (a mention centre included); a model name is loaded with the
    config's encoder settings and saved. Input settings given for a saved encoder are refused: they would
    not be the settings its weights were trained with, and nothing trains here to follow them."""
    changed = sorted(k for k in overrides if k.startswith("encoder.") and k != "encoder.base")
    saved = (Path(str(base)) / CONFIG_FILE).exists()
    if saved and changed:
        raise ConfigError(f"{', '.join(changed)}: with nothing to train (synonyms.steps 0, no mention stage) the start "
                          f"encoder {base} is written as it is; leave these settings out")
    with atomic_dir(output) as tmp:
        if saved:
            shutil.copytree(Path(str(base)), tmp, dirs_exist_ok=True)
        else:
            settings = {k: v for k, v in raw["encoder"].items() if k != "base"}
            BiEncoder.from_pretrained(base, **settings).save(tmp)
        state = {"step": 0, "train_seconds": 0.0, "unchanged": str(base)}
        (tmp / LOG_FILE).write_text(json_text(state, indent=2), encoding="utf8")
    return state


def adapt_retriever(config: Optional[PathLike], output: PathLike, overrides: Optional[Mapping[str, Any]] = None,
                    progress: bool = True) -> Dict[str, Any]:
    """Self-align in the retriever's formats as ``config`` + ``overrides`` say (``paths.kb`` and
    ``paths.kb_format`` name the KB file); write the encoder to ``output``. Returns the loop's state.
    A saved start encoder keeps its input settings unless ``overrides`` set them (see the module doc);
    with nothing to train it is written as it is (:func:`write_start_encoder`). The output's lock is held
    throughout (:func:`~.run_config.run_lock`)."""
    output = Path(output)
    with run_lock(output):
        check_output(output)
        base = retriever_adapt_config(config, overrides)["encoder"]["base"]
        given = dict(overrides or {})
        overrides = {**kept_settings(base), **given}
        raw = retriever_adapt_config(config, overrides)
        if nothing_to_train(raw):
            return write_start_encoder(base, output, raw, given)
        cfg = RetrieverConfig.from_config(raw, str(config or "adapt settings"))
        work = work_folder(output)
        prepare_work(work, inputs_stamp(raw, cfg, base, output), cfg.training.resume)
        raw.to_disk(work / "config.cfg")
        state = run_retriever(cfg, work, progress)
        publish(work, output, state)
        return state


def inputs_stamp(raw: Config, cfg: RetrieverConfig, base: str, output: Path) -> Dict[str, Any]:
    """What a work folder was made from: the settings, the KB file's content, the corpora's (a replayed corpus
    or a mention stage's) and the start encoder. The paths of these inputs are left out of the settings, as
    ``train`` does: their contents count, so they may be spelled otherwise (./kb.jsonl, absolute, another
    working folder)."""
    corpora = {name: getattr(cfg.paths, name) for name in ("train", "dev")}
    corpora = {name: path for name, path in corpora.items() if path and Path(path).is_file()}
    settings = {section: dict(values) for section, values in raw.items()}
    paths = ("kb", *corpora)
    for section, key in (("encoder", "base"), *(("paths", k) for k in paths), *(("training", k) for k in UNSTAMPED)):
        settings.get(section, {}).pop(key, None)
    stamp = {**kb_stamp(cfg.paths.kb, cfg.paths.kb_format, settings), "start_encoder": start_encoder_identity(base, output)}
    stamp.update({f"{name}_sha256": file_digest(path) for name, path in corpora.items()})
    return stamp
