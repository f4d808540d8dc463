"""The record of a NIL calibration, saved with the pipeline it calibrated: ``nil_calibration.json`` — what was
fitted on what (the threshold, P/R/F1, the counts, the curve's points) and the ``linker`` it is about. A pipeline
with several pel_linkers (one per KB) holds one record per linker, ``nil_calibration.<linker>.json``: calibrating
one linker carries the other linkers' records over from the pipeline calibrated, so calibrating them one after
the other keeps every record (an unnamed record of another linker, from before, carried over under its name)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import List, Optional

from ..files import atomic_dir, json_text, read_text
from ..pipeline.linker import PELLinker

RECORD = "nil_calibration.json"


def linker_names(nlp) -> List[str]:
    """The names of the pipeline's pel_linkers, in order."""
    return [n for n, proc in nlp.pipeline if isinstance(proc, PELLinker)]


def record_name(nlp, name: str) -> str:
    """The file of linker ``name``'s record: ``nil_calibration.json`` in a pipeline of one pel_linker, else
    ``nil_calibration.<name>.json``."""
    return RECORD if len(linker_names(nlp)) <= 1 else f"nil_calibration.{name}.json"


def save_calibrated(nlp, name: str, pipeline: Optional[Path], output: Path, record: dict) -> None:
    """The pipeline (its NIL settings already in its config) and linker ``name``'s ``record`` beside it (naming the
    linker), with the other linkers' records from ``pipeline`` (the folder calibrated), written as one folder
    that replaces ``output`` only once complete (a failed save leaves the old one; ``output`` may be
    ``pipeline``)."""
    others = [record_name(nlp, n) for n in linker_names(nlp) if n != name]
    with atomic_dir(output) as tmp:
        nlp.to_disk(tmp)
        for file in others:
            if pipeline is not None and (Path(pipeline) / file).is_file():
                shutil.copyfile(Path(pipeline) / file, tmp / file)
        unnamed = _unnamed_record_of_another(nlp, name, pipeline)
        if unnamed is not None and not (tmp / record_name(nlp, unnamed)).exists():
            shutil.copyfile(Path(pipeline) / RECORD, tmp / record_name(nlp, unnamed))
        (tmp / record_name(nlp, name)).write_text(json_text({"linker": name, **record}, indent=2), encoding="utf8")


def _unnamed_record_of_another(nlp, name: str, pipeline: Optional[Path]) -> Optional[str]:
    """The linker, other than ``name``, that an unnamed ``nil_calibration.json`` of the several-linker ``pipeline``
    is about (a record from before each linker kept its own, naming its ``linker``): carried over under that
    linker's name, not dropped. None when there is none, it names no other linker of the pipeline, or it does not read."""
    if pipeline is None or len(linker_names(nlp)) <= 1 or not (Path(pipeline) / RECORD).is_file():
        return None
    try:
        about = json.loads(read_text(Path(pipeline) / RECORD)).get("linker")
    except (ValueError, AttributeError):
        return None
    return about if about != name and about in linker_names(nlp) else None
