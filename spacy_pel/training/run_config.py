"""A training run's config file and its checkpoint: reading a ``.cfg`` with ``section.key`` overrides,
saving the resolved file beside the run's output, and telling a checkpoint left by a run with other
settings from one this run may resume.

The typed sections the files become are :mod:`spacy_pel.training.config`'s; this module knows only
files and folders, so every trainer (the retriever's, the joint model's, adapt) reads its file here.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Type, TypeVar, Union

from confection import Config

from ..files import atomic_write

T = TypeVar("T")
PathLike = Union[str, Path]

log = logging.getLogger(__name__)
CHECKPOINT_DIR = "last"  # a run's resumable checkpoint, inside its output folder
CONFIG_FILE = "config.cfg"  # the resolved config of the run, beside it
# settings a run may change and still resume its checkpoint
RESUME_FREE = (("training", "resume"), ("training", "device"), ("training", "eval_every"))


def load_config(path: PathLike, overrides: Optional[Mapping[str, Any]] = None) -> Config:
    """The confection config at ``path`` with ``overrides`` (``{"training.max_steps": 10}``) applied."""
    return Config().from_disk(path, overrides=dict(overrides or {}))


def run_settings(raw: Mapping[str, Any]) -> Dict[str, Any]:
    """The settings of a run that its checkpoint depends on: all but :data:`RESUME_FREE`."""
    out = {section: dict(values) if isinstance(values, Mapping) else values for section, values in raw.items()}
    for section, key in RESUME_FREE:
        if isinstance(out.get(section), dict):
            out[section].pop(key, None)
    return out


def config_for_run(cls: Type[T], config: PathLike, output: PathLike, overrides: Optional[Mapping[str, Any]] = None):
    """Read the config file ``config`` (with ``overrides``) as ``cls`` (``RetrieverConfig``, ``JointConfig``)
    and save the resolved file as ``output/config.cfg``; returns the typed config and ``output``.

    A checkpoint (``output/last``) left by a run with other settings (``output/config.cfg``; the
    :data:`RESUME_FREE` ones aside) is removed with a warning, so the run starts over instead of
    resuming stale work under the new settings."""
    raw = load_config(config, overrides)
    cfg = cls.from_config(raw, str(config))
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    save_run_config(raw, output)
    return cfg, output


def save_run_config(raw: Mapping[str, Any], output: PathLike) -> None:
    """``raw`` as ``output/config.cfg``, written atomically — after removing ``output/last`` (with a
    warning) when the config already there says it was left by a run with other settings
    (:func:`run_settings`): a run resumes only its own work."""
    saved, last = Path(output) / CONFIG_FILE, Path(output) / CHECKPOINT_DIR
    if last.exists() and saved.exists() and run_settings(Config().from_disk(saved, interpolate=False)) != run_settings(raw):
        log.warning("%s was left by a run with other settings (%s): starting over", last, saved)
        shutil.rmtree(last)
    atomic_write(saved, lambda tmp: Config(raw).to_disk(tmp))
