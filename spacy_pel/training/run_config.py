"""A training run's config file and its checkpoint: reading a ``.cfg`` with ``section.key`` overrides,
saving the resolved file beside the run's output, and telling a checkpoint left by a run with other
settings, or by one that read other contents under the same paths (a corpus converted again, a KB
rebuilt, a retrained encoder), from one this run may resume.

The typed sections the files become are :mod:`spacy_pel.training.config`'s; this module knows only
files and folders, so every trainer (the retriever's, the joint model's, adapt) reads its file here.
"""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Type, TypeVar, Union

from confection import Config

from ..files import atomic_write, file_digest, folder_digest

T = TypeVar("T")
PathLike = Union[str, Path]

log = logging.getLogger(__name__)
CHECKPOINT_DIR = "last"  # a run's resumable checkpoint, inside its output folder
CONFIG_FILE = "config.cfg"  # the resolved config of the run, beside it
INPUTS_FILE = "inputs.json"  # SHA-256 of the files and folders the run read (input_digests), beside it
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


def input_digests(raw: Mapping[str, Any]) -> Dict[str, str]:
    """SHA-256 of every existing file or folder a run's config names in ``[paths]`` (corpora, KB,
    encoder) and as ``encoder.base`` (a trained retriever to start from; a hub name is no path), by
    setting name: what the run's work depends on besides its settings."""
    named = dict((raw.get("paths") or {}).items()) if isinstance(raw.get("paths"), Mapping) else {}
    named = {f"paths.{key}": value for key, value in named.items()}
    encoder = raw.get("encoder")
    if isinstance(encoder, Mapping) and encoder.get("base"):
        named["encoder.base"] = encoder["base"]
    digests = {}
    for key, value in sorted(named.items()):
        paths = [Path(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, str) and v]
        if paths and all(p.is_file() or p.is_dir() for p in paths):
            digests[key] = "+".join(file_digest(p) if p.is_file() else folder_digest(p) for p in paths)
    return digests


def save_run_config(raw: Mapping[str, Any], output: PathLike) -> None:
    """``raw`` as ``output/config.cfg`` and its inputs' digests (:func:`input_digests`) as
    ``output/inputs.json``, both written atomically — after removing ``output/last`` (with a warning)
    when the files already there say it was left by a run with other settings (:func:`run_settings`)
    or other input contents: a run resumes only its own work. (A checkpoint from before inputs were
    recorded is judged by its settings alone.)"""
    output = Path(output)
    saved, last, inputs_file = output / CONFIG_FILE, output / CHECKPOINT_DIR, output / INPUTS_FILE
    inputs = input_digests(raw)
    if last.exists() and saved.exists():
        if run_settings(Config().from_disk(saved, interpolate=False)) != run_settings(raw):
            log.warning("%s was left by a run with other settings (%s): starting over", last, saved)
            shutil.rmtree(last)
        elif inputs_file.exists():
            before = json.loads(inputs_file.read_text(encoding="utf8"))
            changed = sorted(k for k in set(before) | set(inputs) if before.get(k) != inputs.get(k))
            if changed:
                log.warning("%s was left by a run that read other contents for %s: starting over", last, ", ".join(changed))
                shutil.rmtree(last)
    atomic_write(saved, lambda tmp: Config(raw).to_disk(tmp))
    atomic_write(inputs_file, lambda tmp: Path(tmp).write_text(json.dumps(inputs, indent=1), encoding="utf8"))
