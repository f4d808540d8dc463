"""An encoder's settings as its folder's ``pel_encoder.json`` records them, read across versions, and the entity
settings a KB records of the encoder that built it, compared with an encoder's.

A setting added after an encoder was saved is missing from its file: it reads as the behaviour the encoder was
saved with (:data:`SAVED_BEFORE`), not as today's default. ``entity_text`` (b92df64, 2026-11-30) did not exist
before, when every entity input read the description first (the synonyms of an entity without one).

A setting since removed is kept as saved (:data:`REMOVED`): ``entity_parents`` (0e845e7, removed in 747be74,
2026-11-29) put that many parent names (the KB readers' ``extra.parents``) after the types in the entity input. At
0 it changed nothing, and is dropped. At n > 0 it stays in the encoder's entity settings, and so in its fingerprint,
as the version that saved it counted them: the encoder links with the KBs it built, whose rows hold the vectors of
those inputs (the mention tower never read the setting), and a pipeline saved with it is saved with it again. It
encodes no entity (:func:`check_encodable`): this version writes no parents, and a KB row without them under
that fingerprint would mix two inputs. Loaded with ``entity_parents=0`` the setting is dropped: the encoder of
today, whose KB is rebuilt. Any other key is refused: a setting of another version, which would be dropped silently.
"""
from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Dict, Mapping

from ..files import InputError

# the settings that, with the entity tower's weights and the vocabulary, decide an entity's vector
ENTITY_SETTINGS = ("entity_max_length", "similarity")
# a setting a saved file may lack: the value every encoder saved before it existed worked with
SAVED_BEFORE = {"entity_text": "description_or_synonyms"}
# a removed setting: (the value that changed nothing, what it did, when it went)
REMOVED = {"entity_parents": (0, "parent names after the types in the entity input", "747be74, 2026-11-29")}
NOT_SETTINGS = ("fingerprint",)  # what else the file records


class EncoderMismatchError(ValueError):
    """A KB built with one entity encoder was used with another."""


def saved_config(file: Path, config_class, overrides: Mapping[str, object]):
    """``config_class`` (the encoder's settings dataclass) as the file ``file`` records it, with ``overrides``;
    a removed setting's value that changed something is kept in its ``extra``. A key the class neither has nor
    had is an :class:`InputError`; a removed setting given another value than its no-op one a ``ValueError``."""
    data = json.loads(Path(file).read_text(encoding="utf8"))
    names = {f.name for f in fields(config_class)}
    unknown = sorted(k for k in data if k not in names and k not in REMOVED and k not in NOT_SETTINGS)
    if unknown:
        raise InputError(f"{file}: setting(s) {', '.join(unknown)} unknown to this version of spacy_pel (the encoder was "
                         "saved by another version, whose entity or mention inputs they may change); load it with that version")
    values = {**SAVED_BEFORE, **{k: data[k] for k in names if k in data}}
    extra = dict(values.get("extra") or {})
    for key, (noop, _, when) in REMOVED.items():
        if key in overrides and overrides[key] != noop:
            raise ValueError(f"{key} was removed from spacy_pel ({when}): only {key}={noop} (dropping it) can be given")
        value = overrides[key] if key in overrides else data.get(key, extra.get(key, noop))
        extra.pop(key, None)
        if value != noop:
            extra[key] = value
    values.update({k: v for k, v in overrides.items() if k not in REMOVED}, extra=extra)
    return config_class(**values)


def saved_form(config) -> dict:
    """What ``pel_encoder.json`` records of ``config`` (the fingerprint aside): its fields, a removed setting it
    keeps written where the version that had it wrote it."""
    data = asdict(config)
    extra = dict(data.get("extra") or {})
    data.update({k: extra.pop(k) for k in REMOVED if k in extra}, extra=extra)
    return data


def removed_settings(config) -> Dict[str, object]:
    """The removed settings ``config`` keeps (a value that changed the entity input: :data:`REMOVED`)."""
    return {k: v for k, v in (config.extra or {}).items() if k in REMOVED and v != REMOVED[k][0]}


def check_encodable(config) -> None:
    """Refuse (:class:`InputError`, one line) to encode entities with an encoder that keeps a removed setting."""
    for key, value in removed_settings(config).items():
        noop, what, when = REMOVED[key]
        raise InputError(f"this encoder was saved with {key}={value} ({what}), a setting removed from spacy_pel ({when}): "
                         f"it links with the KBs it built but encodes no entity; to build a KB, save it without the "
                         f"setting (BiEncoder.from_pretrained(ENCODER, {key}={noop}).save(NEW)), build the KB with NEW "
                         "and retarget the pipeline to it (its entity inputs then differ from the ones it was trained on)")


def mismatch_reason(recorded: Mapping[str, object], encoder) -> str:
    """Why ``encoder`` is not the entity encoder that recorded ``recorded`` (its ``entity_settings()``): a removed
    setting that differs, a setting this version does not know, the settings that differ with the option that gives
    the encoder the recorded value, or else the weights."""
    given = encoder.entity_settings()
    gone = [k for k in REMOVED if recorded and recorded.get(k, REMOVED[k][0]) != given.get(k, REMOVED[k][0])]
    if gone:
        return "; ".join(f"the KB's {k} is {recorded.get(k, REMOVED[k][0])!r}, the encoder's {given.get(k, REMOVED[k][0])!r} "
                         f"({k}: {REMOVED[k][1]}, a setting removed from spacy_pel in {REMOVED[k][2]}; a KB and a pipeline "
                         "are rebuilt and retargeted without it)" for k in gone)
    unknown = sorted(k for k in recorded if k not in ENTITY_SETTINGS and k not in REMOVED)
    if unknown:
        return (f"the KB records entity setting(s) {', '.join(unknown)}, unknown to this version of spacy_pel "
                "(it was built by another version)")
    differ = [k for k in ENTITY_SETTINGS if k in recorded and recorded[k] != given[k]]
    if differ:
        return "; ".join(f"its {k} is {given[k]!r}, the KB's {recorded[k]!r} (a training command's --encoder.{k} "
                         f"{recorded[k]} sets the KB's)" for k in differ)
    if recorded:
        return "the settings agree, so the entity tower's weights or vocabulary differ"
    return "the entity tower's weights, vocabulary or settings differ"
