"""Where a KB folder records the encoder that built it, and where it finds that encoder again.

``meta.json``'s ``encoder_source`` is what ``build-names``, ``build-kb --add``, ``retarget``, ``evaluate
--kb`` and a linker given only a KB load when given no encoder: a Hugging Face name as given, a local
folder as an absolute path (so that the KB works from any working directory). A local folder is also
recorded relative to the KB folder (``encoder_source_from_kb``), so that a KB moved or copied together
with its encoder (a renamed project, a copy on a server, a CI cache) still finds it; the encoder's
fingerprint, checked wherever it is loaded, makes either path safe to take."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Mapping, Union

from ..models.encoder import DEFAULT_ENCODER_NAMES

PathLike = Union[str, Path]
RELATIVE_KEY = "encoder_source_from_kb"


def encoder_location(source: str) -> str:
    """What a KB records as the encoder that built it (``meta.json``'s ``encoder_source``): a local folder
    as an absolute path, so that the KB finds it from any working directory; a Hugging Face name as given."""
    path = Path(source).expanduser()
    if source in DEFAULT_ENCODER_NAMES or not path.is_dir():
        return source
    return os.path.abspath(path)


def relative_record(source: str, kb_folder: PathLike) -> Dict[str, str]:
    """``{RELATIVE_KEY: path}``: the local encoder folder ``source`` (an absolute path) relative to the KB
    folder ``kb_folder``; empty for a model name, or where no relative path exists (another drive)."""
    if not source or source in DEFAULT_ENCODER_NAMES or not os.path.isabs(source) or not os.path.isdir(source):
        return {}
    try:
        return {RELATIVE_KEY: os.path.relpath(source, os.path.abspath(kb_folder))}
    except ValueError:  # Windows: another drive
        return {}


def recorded_encoder(meta: Mapping[str, object], kb_folder: PathLike) -> str:
    """The encoder a KB folder's ``meta`` names: the folder at its recorded place relative to the KB when
    there is one there (it moved with the KB), else ``encoder_source`` as recorded."""
    source = str(meta.get("encoder_source", "") or "")
    relative = meta.get(RELATIVE_KEY)
    if isinstance(relative, str) and relative:
        moved = os.path.normpath(os.path.join(os.path.abspath(kb_folder), relative))
        if moved != source and os.path.isdir(moved):
            return moved
    return source


def encoder_beside(source: str, encoder_folder: PathLike, kb_folder: PathLike) -> Dict[str, str]:
    """The record of a KB saved together with its entity encoder (a pipeline's ``kb/`` and ``encoder/``):
    ``encoder_folder`` relative to ``kb_folder``; ``encoder_source`` kept only as it names no folder of this
    machine by its absolute path (a Hugging Face name), so that a copy carries no path of where it was made."""
    try:
        relative = os.path.relpath(os.path.abspath(encoder_folder), os.path.abspath(kb_folder))
    except ValueError:  # Windows: another drive
        return relative_record(source, kb_folder)
    return {"encoder_source": "" if os.path.isabs(source) else source, RELATIVE_KEY: relative}
