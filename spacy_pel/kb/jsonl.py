"""The canonical KB format, JSONL: one entity per line (``jsonl``).

::

    {"id": "D008094", "name": "Lithium", "aliases": ["Li"], "types": ["Chemicals and Drugs"],
     "description": "", "extra": {"tree_numbers": ["D01.268.556.579"]}}

Only ``id`` and ``name`` are required. White space around the id, the name, an alias or a type is not
kept (``" D1 "`` is ``D1``, and a second ``D1`` a duplicate), as in the other formats.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, List, Optional

from .. import files
from .entity import Collector, Entity, PathLike, nonblank_lines, unique
from .registry import register_kb_reader

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _jsonl_problem(data: object, line: str) -> Optional[str]:
    """Why a parsed JSONL line is not an entity record (``None`` when it is one)."""
    if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not isinstance(data.get("name"), str):
        return 'each line must be an object with string "id" and "name"'
    for key in ("aliases", "types"):
        if data.get(key) is not None and not (
            isinstance(data[key], list) and all(isinstance(x, str) for x in data[key])
        ):
            return f'"{key}" must be a list of strings'
    if data.get("description") is not None and not isinstance(data["description"], str):
        return f'"description" must be a string, not {type(data["description"]).__name__}'
    if data.get("extra") is not None and not isinstance(data["extra"], dict):
        return f'"extra" must be an object, not {type(data["extra"]).__name__}'
    if _SURROGATE_ESCAPE.search(line):
        try:
            json.dumps(data, ensure_ascii=False).encode("utf8")
        except UnicodeEncodeError:
            return "a string holds an unpaired surrogate escape (\\ud800-\\udfff), which is not text"
    return None


def _entity(data: dict) -> Entity:
    """The entity of a record, its texts stripped as the other formats' readers strip them: the id and name
    (by :class:`Collector`), each alias and type (an empty one, a repeated one or the name dropped)."""
    entity = Entity.from_dict(data)
    entity.aliases = unique(entity.aliases, entity.name.strip())
    entity.types = unique(entity.types)
    return entity


@register_kb_reader("jsonl")
def read_jsonl(path: PathLike, bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    path = Path(path)
    out = Collector(bad_lines)
    for lineno, line in nonblank_lines(path, bad_lines):
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            out.fail(path, lineno, f"invalid JSON: {err.msg} (column {err.colno})")
            continue
        except (ValueError, RecursionError) as err:  # e.g. a 5,000-digit number, nesting too deep
            out.fail(path, lineno, f"invalid JSON: {str(err).splitlines()[0] or type(err).__name__}")
            continue
        problem = _jsonl_problem(data, line)
        if problem:
            out.fail(path, lineno, problem)
            continue
        out.add(_entity(data), path, lineno)
    return out.result()


def write_jsonl(entities: Iterable[Entity], path: PathLike) -> None:
    """Entities as JSON lines (the KB's ``jsonl`` format), written atomically."""
    files.write_jsonl((e.to_dict() for e in entities), path)
