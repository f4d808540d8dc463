"""The settings a ``pel_linker`` was saved with, recorded in its folder (``settings.json``, beside the weights and
data) and compared, when the folder (or its bytes) is read back, with the settings of the component reading it.

The config stays the one source of truth: nothing read here changes a setting. But spaCy's ``from_bytes`` recipe
(``spacy.blank``, ``add_pipe`` of each factory, then ``nlp.from_bytes``), and ``add_pipe`` then ``from_disk``, make
the component from the factory's defaults (or what ``add_pipe`` was given), not from the saved pipeline's config:
it reads the saved encoder and KB, and would link otherwise in silence (no threshold, another ``top_k``, no
rules). So the folder's reader names the settings that differ from the recorded ones in one warning
(:data:`SETTINGS_DIFFER`). ``spacy.load`` builds the component from the saved pipeline's own config, where an
override is meant: it is not checked; nor is a folder saved before the record was kept.

Recorded: the flat settings the component links with (:class:`.config.LinkerSettings`, but ``kb`` and
``encoder``, the resources, whose paths ``sources.json`` compares), and the parts' blocks of its config
(``mentions``, ``vectors``, ``rules``, ``nil``, ``objective``, ``scorer``) when the component knows the pipeline
that made it (its factory tells: :func:`remember_owner`). As JSON, never pickle.
"""
from __future__ import annotations

import json
import sys
import weakref
from dataclasses import fields
from pathlib import Path
from typing import Any, Dict, List, Optional

import srsly

from .config import LinkerSettings

SETTINGS_FILE = "settings.json"
RESOURCES = {"kb", "encoder"}  # compared by sources.json: null keeps the saved copy, another path is followed
FLAT = [f.name for f in fields(LinkerSettings) if f.name not in RESOURCES]
SETTINGS_DIFFER = (
    "{name} was made with other settings than those saved with the weights and data it reads, and links with its own "
    "(the config is the source of truth; a saved folder holds weights and data): {diffs}. To link as the saved pipeline "
    "did, load it with its config: spacy.load(DIR), or spacy.util.load_model_from_config(the saved nlp.config)"
    ".from_bytes(data) for nlp.to_bytes()")

# the pipeline that made each component (weakly: neither kept alive, nor copied or pickled with the component)
_OWNERS: "weakref.WeakKeyDictionary[object, weakref.ref]" = weakref.WeakKeyDictionary()


def remember_owner(component: object, nlp: object) -> None:
    """The factory made ``component`` for ``nlp``: its parts' config blocks are read from ``nlp.config``."""
    _OWNERS[component] = weakref.ref(nlp)


def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples as lists, a Config as a dict)."""
    return json.loads(json.dumps(value, default=str))


def _parts(component) -> Optional[Dict[str, Any]]:
    """The parts' blocks of ``component``'s config (None: not known, as for a component made by hand)."""
    owner = _OWNERS.get(component)
    nlp = owner() if owner is not None else None
    name = next((n for n, proc in nlp.components if proc is component), None) if nlp is not None else None
    if name is None:
        return None
    try:
        block = nlp.config.interpolate()["components"][name]
    except (KeyError, ValueError):  # a config that does not interpolate: nothing recorded of the parts
        return None
    return _plain({k: v for k, v in block.items() if k not in {*FLAT, *RESOURCES, "factory"}})


def settings_record(component) -> Dict[str, Any]:
    """What :func:`write_settings` records of ``component`` (the module doc)."""
    record: Dict[str, Any] = {"settings": _plain({k: getattr(component.cfg, k) for k in FLAT})}
    parts = _parts(component)
    if parts is not None:
        record["parts"] = parts
    return record


def write_settings(component, path: Path) -> None:
    srsly.write_json(Path(path) / SETTINGS_FILE, settings_record(component))


_MISSING = object()  # a key one side has not


def _short(value: Any) -> str:
    text = "none" if value is _MISSING else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _diff(saved: Any, here: Any, prefix: str) -> List[str]:
    """The dotted names (with both values) where ``saved`` and ``here`` differ: blocks key by key."""
    if isinstance(saved, dict) and isinstance(here, dict):
        found = []
        for key in [*saved, *(k for k in here if k not in saved)]:
            found += _diff(saved.get(key, _MISSING), here.get(key, _MISSING), f"{prefix}{key}.")
        return found
    return [] if saved == here else [f"{prefix[:-1]} (saved {_short(saved)}, here {_short(here)})"]


def loaded_by_spacy_load() -> bool:
    """Is this read part of ``spacy.load`` (spaCy's ``load_model_from_path``), which made the pipeline from
    the saved config itself? Read from the call stack: spaCy passes its components nothing that says it."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "load_model_from_path" and frame.f_globals.get("__name__") == "spacy.util":
            return True
        frame = frame.f_back
    return False


def settings_differ(component, path: Path) -> List[str]:
    """The settings of ``component`` that differ from those recorded in the folder ``path`` it reads (as
    ``name (saved X, here Y)``); none for a folder without the record, or a read by ``spacy.load``."""
    file = Path(path) / SETTINGS_FILE
    if not file.is_file() or loaded_by_spacy_load():
        return []
    saved, here = srsly.read_json(file), settings_record(component)
    found = _diff(saved.get("settings", {}), here["settings"], "")
    if "parts" in saved and "parts" in here:
        found += _diff(saved["parts"], here["parts"], "")
    return found
