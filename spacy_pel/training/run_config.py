"""A training run's config file and its checkpoint: reading a ``.cfg`` with ``section.key`` overrides,
saving the resolved file beside the run's output, and telling a checkpoint left by a run with other
settings, or by one that read other contents under the same paths (a corpus converted again, a KB
rebuilt, a retrained encoder), or one with a file a power loss left unreadable (set aside), from one this
run may resume. A run is recorded before its inputs are read and takes effect — a stale checkpoint
dropped, the config and digests written — only when its training starts (:func:`start_run`): a run
refused for a typo costs the previous one nothing. A run holds its output's lock from start to end
(:func:`run_lock`): one run at a time writes an output.

The typed sections the files become are :mod:`spacy_pel.training.config`'s; this module knows only
files and folders, so every trainer (the retriever's, the joint model's, adapt) reads its file here.
"""
from __future__ import annotations

import configparser
import json
import logging
import os
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Type, TypeVar, Union

import numpy as np
from confection import Config, ConfigValidationError
from safetensors import SafetensorError, safe_open

from ..files import InputError, atomic_write, file_digest, folder_digest, json_text, output_lock, read_text
from ..retrieval.index import is_name_index

T = TypeVar("T")
PathLike = Union[str, Path]

log = logging.getLogger(__name__)
CHECKPOINT_DIR = "last"  # a run's resumable checkpoint, inside its output folder
CONFIG_FILE = "config.cfg"  # the resolved config of the run, beside it
INPUTS_FILE = "inputs.json"  # SHA-256 of the files and folders the run read (input_digests), beside it
PENDING_FILE = "pending_run.json"  # a run recorded but not started yet (save_run_config → start_run), beside it
# what a run writes into its output folder besides its config: the checkpoint, the best model and the log of every
# trainer, the retriever's stage snapshots (after_synonyms), train-spans' scorer and report, train-reranker's report.
# A run that starts over (no checkpoint resumed) sets the earlier run's aside before its config is written, so no
# output is ever read as the model of a config that did not make it.
RUN_OUTPUTS = (CHECKPOINT_DIR, "best", "train_log.json", "after_*", "span_scorer.safetensors", "span_report.json",
               "rerank_report.json")
DISCARDED = ".discarded-"  # prefix of an earlier run's output renamed aside and not yet removed (a kill in between)
_HELD = threading.local()  # the outputs whose run_lock this thread holds (a nested run keeps it)
# settings a run may change and still resume its checkpoint (none changes what a step computes; the time
# budget counts over resumed runs, so a run stopped by it is continued with a longer one)
RESUME_FREE = (("training", "resume"), ("training", "device"), ("training", "eval_every"), ("training", "max_minutes"))
DAMAGED = ".damaged-"  # NAME.damaged-TIME: a checkpoint or work folder that could not be read, set aside


def load_config(path: PathLike, overrides: Optional[Mapping[str, Any]] = None) -> Config:
    """The confection config at ``path`` with ``overrides`` (``{"training.max_steps": 10}``) applied.

    A UTF-8 byte order mark is read as if it were not there (as by every reader of the package); a file that
    is not UTF-8 is refused as ``FILE:LINE: not UTF-8 text (byte 0xe9 at column N)`` (:class:`InputError`),
    and one that does not parse as a config raises confection's error with the file's name in its title."""
    text = read_text(path).replace("\r\n", "\n").replace("\r", "\n")  # as a text-mode read
    try:
        return Config().from_str(text, overrides=dict(overrides or {}))
    except ConfigValidationError as err:
        if err.errors:  # a setting named (an override of a section that does not exist): said as it is
            raise
        raise ConfigValidationError(title=f"{path}: not a valid config", desc=err.desc, show_config=False) from err


def run_settings(raw: Mapping[str, Any]) -> Dict[str, Any]:
    """The settings of a run that its checkpoint depends on: all but :data:`RESUME_FREE`."""
    out = {section: dict(values) if isinstance(values, Mapping) else values for section, values in raw.items()}
    for section, key in RESUME_FREE:
        if isinstance(out.get(section), dict):
            out[section].pop(key, None)
    return out


def changed_settings(before: Mapping[str, Any], now: Mapping[str, Any]) -> List[str]:
    """The settings that differ between two runs' settings (sections of key → value), as ``section.key``."""
    out = []
    for section in sorted({*before, *now}):
        old, new = before.get(section), now.get(section)
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            out += [f"{section}.{key}" for key in sorted({*old, *new}) if old.get(key) != new.get(key)]
        elif old != new:
            out.append(section)
    return out


def stamp_changes(old: Mapping[str, Any], new: Mapping[str, Any], names: Mapping[str, str]) -> List[str]:
    """What differs between two stamps of a work folder's inputs (``names``: how to say each entry: "another KB
    file"), the changed settings of a ``settings`` entry named: ``["other settings (training.lr)"]``."""
    out = []
    for key in sorted(k for k in {*old, *new} if old.get(k) != new.get(k)):
        what = names.get(key, key)
        if isinstance(old.get(key), Mapping) and isinstance(new.get(key), Mapping):
            what += f" ({', '.join(changed_settings(old[key], new[key]))})"
        out.append(what + ("" if key in old else " (not recorded there)"))
    return out


@contextmanager
def run_lock(output: PathLike) -> Iterator[None]:
    """The lock every trainer holds on its ``output`` for its whole run (``OUTPUT.lock`` beside it,
    :class:`~spacy_pel.files.output_lock`, as build-kb's): a second run into the same output, started while
    this one trains, fails at once with :class:`~spacy_pel.files.OutputBusyError` naming the holder's pid,
    instead of setting this run's outputs aside (:func:`start_run`) while it still writes them. A run nested
    in one that holds it (``train_e2e_seeds``' first model, ``train_e2e`` into the same output) keeps it. An
    output without a name of its own (``.``) is locked by its absolute path."""
    output = Path(output)
    output = output if output.name not in ("", "..") else Path(os.path.abspath(output))
    key, held = os.path.abspath(output), _HELD.__dict__.setdefault("outputs", set())
    if key in held:
        yield
        return
    with output_lock(output):
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)


def config_for_run(cls: Type[T], config: PathLike, output: PathLike, overrides: Optional[Mapping[str, Any]] = None):
    """Read the config file ``config`` (with ``overrides``) as ``cls`` (``RetrieverConfig``, ``JointConfig``)
    and record it as the run to start in ``output`` (:func:`save_run_config`); returns the typed config
    and ``output``.

    A checkpoint (``output/last``) left by a run with other settings (``output/config.cfg``; the
    :data:`RESUME_FREE` ones aside) is not resumed, and is removed with a warning when the run starts
    (:func:`start_run`), so the run starts over instead of resuming stale work under the new settings."""
    raw = load_config(config, overrides)
    cfg = cls.from_config(raw, str(config))
    save_run_config(raw, output)
    return cfg, Path(output)


def named_inputs(raw: Mapping[str, Any]) -> Dict[str, List[Path]]:
    """The paths a run's config names in ``[paths]`` (corpora, KB, encoder) and as ``encoder.base`` (a
    trained retriever to start from, or a hub name), by setting name."""
    named = dict((raw.get("paths") or {}).items()) if isinstance(raw.get("paths"), Mapping) else {}
    named = {f"paths.{key}": value for key, value in named.items()}
    encoder = raw.get("encoder")
    if isinstance(encoder, Mapping) and encoder.get("base"):
        named["encoder.base"] = encoder["base"]
    return {key: [Path(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, str) and v]
            for key, value in sorted(named.items())}


def input_digests(raw: Mapping[str, Any]) -> Dict[str, str]:
    """SHA-256 of every existing file or folder of :func:`named_inputs` (a hub name is no path), by
    setting name: what the run's work depends on besides its settings. A folder's hidden entries, writes in
    progress (``*.partial``, ``*.lock``) and name indexes (``build-names``' default ``KB/names``: no trainer
    reads them) are left out, so building a KB's name rows does not make a run's checkpoint stale."""
    digests = {}
    for key, paths in named_inputs(raw).items():
        if paths and all(p.is_file() or p.is_dir() for p in paths):
            digests[key] = "+".join(file_digest(p) if p.is_file() else folder_digest(p, _not_read(p)) for p in paths)
    return digests


def _not_read(folder: Path) -> List[Path]:
    """The entries of an input ``folder`` no run reads: hidden ones, name index folders, and the work folders and
    lock files of writes in progress (``KB/names.partial``, ``KB/names.lock``: an interrupted build-names)."""
    return [p for p in folder.iterdir() if p.name.startswith(".") or p.name.endswith((".partial", ".lock"))
            or (p.is_dir() and is_name_index(p))]


def check_apart(raw: Mapping[str, Any], output: PathLike) -> None:
    """Refuse an ``output`` that is, or is inside, an input folder of :func:`named_inputs`, or that holds one
    (:class:`InputError`): the run would write into its own input, whose contents then change under it
    (and its checkpoint, judged by them, could never be resumed)."""
    out = Path(output).resolve()
    for key, paths in named_inputs(raw).items():
        for path in (p for p in paths if p.is_dir()):
            folder = path.resolve()
            if out == folder or folder in out.parents or out in folder.parents:
                how = "is" if out == folder else "is inside" if folder in out.parents else "holds"
                raise InputError(f"output {output} {how} the input folder {path} ({key}): a run writes into its "
                                 "output, so give one apart from its inputs")


def save_run_config(raw: Mapping[str, Any], output: PathLike) -> None:
    """Record ``raw`` and its inputs' digests (:func:`input_digests`) as the run to start in ``output``
    (``output/pending_run.json``, written atomically, after :func:`check_apart`). Nothing else there
    changes until the run starts (:func:`start_run`): a run that fails on its inputs before then leaves
    the previous run's checkpoint and config as they were."""
    check_apart(raw, output)
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    text = json_text({"config": Config(raw).to_str(), "inputs": input_digests(raw)}, indent=1)
    atomic_write(output / PENDING_FILE, lambda tmp: Path(tmp).write_text(text, encoding="utf8"))


def pending_run(output: PathLike) -> Optional[Dict[str, Any]]:
    """The run :func:`save_run_config` recorded in ``output`` and that has not started: its ``config``
    (text) and ``inputs`` (digests); None when there is none."""
    pending = Path(output) / PENDING_FILE
    return json.loads(pending.read_text(encoding="utf8")) if pending.exists() else None


def unreadable(path: Path) -> Optional[str]:
    """Why the file ``path`` cannot be read, or None: empty, or a JSON, safetensors (its header), ``.npy`` or
    ``.cfg`` file that does not parse — what a power loss leaves of a file whose data was not on the disk yet."""
    try:
        if path.stat().st_size == 0:
            return "empty"
        if path.suffix == ".json":
            json.loads(path.read_text(encoding="utf8"))
        elif path.suffix == ".safetensors":
            with safe_open(str(path), "np"):
                pass
        elif path.suffix == ".npy":
            np.load(path, mmap_mode="r", allow_pickle=False)
        elif path.suffix == ".cfg":
            Config().from_disk(path, interpolate=False)
    except (OSError, ValueError, SafetensorError, configparser.Error) as err:
        return next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)[:200]
    return None


def first_unreadable(files: Iterable[Path]) -> Optional[str]:
    """``FILE: reason`` for the first of ``files`` (those that exist) that cannot be read (:func:`unreadable`)."""
    return next((f"{path}: {why}" for path in files if path.is_file() and (why := unreadable(path))), None)


def set_aside_unreadable(folder: Path, files: Iterable[Path]) -> bool:
    """When one of ``files`` cannot be read (:func:`first_unreadable`), rename ``folder`` (a checkpoint, adapt's work
    folder) to ``NAME.damaged-TIME`` beside it, with a warning naming the file and where the folder went, and return
    True: the run starts over, as from a stale checkpoint, and the damaged one is kept to look at, not removed."""
    why = first_unreadable(files)
    if why is None:
        return False
    aside, when, n = folder, time.strftime("%Y%m%d-%H%M%S"), 0
    while aside == folder or os.path.lexists(aside):
        n += 1
        aside = folder.with_name(f"{folder.name}{DAMAGED}{when}" + (f"-{n}" if n > 1 else ""))
    os.replace(folder, aside)
    log.warning("%s cannot be resumed (%s; a power loss?): set aside as %s, starting over", folder, why, aside)
    return True


def checkpoint_files(output: PathLike) -> List[Path]:
    """The files resuming ``output/last`` reads: the checkpoint's own, and the run's config and inputs' digests it is
    judged by (:func:`stale_checkpoint`)."""
    output = Path(output)
    return [output / CONFIG_FILE, output / INPUTS_FILE,
            *sorted(p for p in (output / CHECKPOINT_DIR).rglob("*") if p.is_file())]


def stale_checkpoint(output: PathLike, run: Optional[Dict[str, Any]] = None) -> Optional[str]:
    """Why ``output/last`` is not the run's to resume: it was left by a run with other settings
    (``output/config.cfg``, by :func:`run_settings`) or other input contents (``output/inputs.json``)
    than the run :func:`save_run_config` recorded (``run``: that record, read when not given); None when
    it may be resumed, or there is no such run or checkpoint. (A checkpoint from before inputs were
    recorded is judged by its settings alone.)"""
    output = Path(output)
    saved, inputs_file = output / CONFIG_FILE, output / INPUTS_FILE
    run = run if run is not None else pending_run(output)
    if run is None or not (saved.exists() and (output / CHECKPOINT_DIR).exists()):
        return None
    now, then = (run_settings(c) for c in (Config().from_str(run["config"], interpolate=False),
                                           Config().from_disk(saved, interpolate=False)))
    read_before = json.loads(inputs_file.read_text(encoding="utf8")) if inputs_file.exists() else {}
    for key in set(read_before) & set(run["inputs"]):  # files compared by contents below, so their paths may be
        section, name = key.split(".", 1)  # spelled otherwise (./corpus/x.spacy, absolute: another working folder)
        for settings in (now, then):
            if isinstance(settings.get(section), dict):
                settings[section].pop(name, None)
    if now != then:
        return f"a run with other settings ({saved})"
    if inputs_file.exists():
        before, inputs = read_before, run["inputs"]
        changed = sorted(k for k in set(before) | set(inputs) if before.get(k) != inputs.get(k))
        if changed:
            return f"a run that read other contents for {', '.join(changed)}"
    return None


def start_run(output: PathLike, resumed: bool = False) -> None:
    """Start the run :func:`save_run_config` recorded in ``output`` (called as its training begins, its
    inputs read and checked): unless it ``resumed`` the checkpoint there, set the earlier run's outputs
    (:data:`RUN_OUTPUTS`: ``last``, ``best``, ``train_log.json`` …) aside and remove them — with a warning
    when :func:`stale_checkpoint` says the checkpoint was not this run's — and then write its config as
    ``output/config.cfg`` and its inputs' digests as ``output/inputs.json``, atomically. Each output is
    renamed aside in one step before the config is written, so a kill at any point never leaves the new
    config beside an earlier run's model or log. Nothing when no run is recorded there."""
    output = Path(output)
    run, last = pending_run(output), output / CHECKPOINT_DIR
    if not resumed and last.is_dir():  # one that cannot be read (or judged) is kept aside, not removed: said so
        set_aside_unreadable(last, checkpoint_files(output))
    if run is None:
        return
    why = stale_checkpoint(output, run)
    if why:
        log.warning("%s was left by %s: starting over", last, why)
    if why or not resumed:
        discard_outputs(output)
    inputs = json_text(run["inputs"], indent=1)
    atomic_write(output / CONFIG_FILE, lambda tmp: Path(tmp).write_text(run["config"], encoding="utf8"))
    atomic_write(output / INPUTS_FILE, lambda tmp: Path(tmp).write_text(inputs, encoding="utf8"))
    (output / PENDING_FILE).unlink()


def discard_outputs(output: Path) -> List[str]:
    """Rename every earlier run's output (:data:`RUN_OUTPUTS`) in ``output`` aside, checkpoint first, then remove
    them (and those a killed run left aside); returns their names."""
    _remove_aside(output)
    found = sorted({p for pattern in RUN_OUTPUTS for p in output.glob(pattern)},
                   key=lambda p: (p.name != CHECKPOINT_DIR, p.name))
    for path in found:
        os.replace(path, output / f"{DISCARDED}{path.name}")
    _remove_aside(output)
    if found:
        log.info("%s: the earlier run's %s removed (this run starts over)", output, ", ".join(p.name for p in found))
    return [p.name for p in found]


def _remove_aside(output: Path) -> None:
    for path in output.glob(f"{DISCARDED}*"):
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
