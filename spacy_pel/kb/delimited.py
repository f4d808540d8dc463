"""A KB as a table: comma- (``csv``) or tab-separated (``tsv``) rows, one entity a row — a catalogue as
a spreadsheet exports it, or spaCy's entity-linking tutorial's ``entities.csv``.

With a header line (a first row with an ``id`` and a ``name`` column), the columns are named, in any
order and case: ``id`` (or ``identifier``), ``name`` (or ``label``, ``preferred_name``, ``prefLabel``),
``aliases`` (or ``synonyms``, ``alias``, ``synonym``), ``types`` (or ``type``) and ``description`` (or
``definition``); a first row naming some of these but no id or no name column is refused (it would be
read as an entity); ``aliases`` and ``types`` hold several values joined by ``|``;
any other column is kept in the entity's ``extra`` under its header (a URL, a category)::

    id,name,aliases,types,description
    P001,acetylsalicylic acid,aspirin|ASA,drug,a salicylate used against pain

Without one, a row is ``id, name[, description]`` (spaCy's ``entities.csv``: ``Q312545,Roy Stanley
Emerson,Australian tennis player``). ``csv`` reads RFC 4180 quoting (a quoted field may hold commas,
quotes doubled, line breaks); ``tsv`` splits at tabs only, quotes being ordinary text.

A row of another width than the header, a header naming one field twice, a malformed quoted field
(an unclosed quote names the line it opened on), a lone carriage return outside a quoted field is refused
as ``FILE:LINE: reason``, or skipped and counted with ``bad_lines`` (a header naming a field twice leaves
no row readable: nothing is read). A lone CR is not kept as text, as the other readers keep it: a table
saved with classic-Mac CR line ends is one line to them, and a table without a header would then be read
as one entity whose cells hold the next rows, silently.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from .. import files
from .entity import Collector, Entity, KBFormatError, PathLike, split, unique
from .registry import register_kb_reader

# header cell (case-folded) → Entity field
COLUMNS = {"id": "id", "identifier": "id", "name": "name", "label": "name", "preferred_name": "name",
           "preferred name": "name", "preflabel": "name", "aliases": "aliases", "alias": "aliases",
           "synonyms": "aliases", "synonym": "aliases", "types": "types", "type": "types",
           "description": "description", "definition": "description"}
POSITIONAL = ("id", "name", "description")  # the columns of a table without a header line
MULTI = ("aliases", "types")  # fields of several values joined by VALUE_SEP
VALUE_SEP = "|"


def _rows(path: Path, tab: bool, bad_lines: Optional[files.BadLines]) -> Iterator[Tuple[int, Optional[List[str]], str]]:
    """``(line, cells, "")`` per row (the line it starts on) or ``(line, None, reason)`` for a malformed one."""
    numbers: List[int] = []

    def lines() -> Iterator[str]:
        for lineno, text in files.read_lines(path, KBFormatError, bad_lines):
            numbers.append(lineno)
            yield text + "\n"

    dialect = dict(delimiter="\t", quoting=csv.QUOTE_NONE) if tab else dict(delimiter=",", strict=True)
    reader = csv.reader(lines(), **dialect)
    while True:
        before = len(numbers)
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            line = numbers[before] if len(numbers) > before else (numbers[-1] if numbers else 1)
            if "new-line character" in str(err):  # a lone CR (each line ends at \n): csv's words are about open()
                yield line, None, (f"a lone carriage return (\\r) inside {'a' if tab else 'an unquoted'} field: CR line "
                                   f"ends? save the file with LF or CRLF line ends{'' if tab else ', or quote the field'}")
            else:
                yield line, None, f"not a valid {'TSV' if tab else 'CSV'} row ({err})"
            continue
        yield numbers[before], cells, ""


def _header(cells: List[str]) -> Optional[List[str]]:
    """The field (or ``extra`` key) of each column when ``cells`` is a header line, else None."""
    folded = [c.strip().casefold() for c in cells]
    fields = [COLUMNS.get(c, cells[i].strip() or f"column {i + 1}") for i, c in enumerate(folded)]
    return fields if "id" in fields and "name" in fields else None


def _entity(fields: List[str], cells: List[str]) -> Entity:
    values: Dict[str, str] = {}
    extra: Dict[str, object] = {}
    for key, cell in zip(fields, cells):
        cell = cell.strip()
        if key in ("id", "name", "description", *MULTI):
            values[key] = cell
        elif cell:
            extra[key] = cell
    name = values.get("name", "")
    return Entity(values.get("id", ""), name, unique(split(values.get("aliases", ""), VALUE_SEP), name),
                  unique(split(values.get("types", ""), VALUE_SEP)), values.get("description", ""), extra)


def read_table(path: PathLike, tab: bool, bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    """The entities of a CSV (``tab`` False) or TSV table; see the module."""
    path = Path(path)
    out = Collector(bad_lines)
    fields: Optional[List[str]] = None
    first, header_line = True, 0
    for lineno, cells, problem in _rows(path, tab, bad_lines):
        if problem:
            out.fail(path, lineno, problem)
            continue
        if not any(c.strip() for c in cells):
            continue
        if first:
            first = False
            fields = _header(cells)
            if fields is None and any(c.strip().casefold() in COLUMNS for c in cells):  # a header, id or name unnamed
                out.fail(path, lineno, f"a header line ({', '.join(c.strip() for c in cells)}) without an id and a name "
                                       "column: name them id and name (or label), so that it is not read as an entity")
                return out.result()
            if fields is not None:
                header_line = lineno
                folded = [f.casefold() for f in fields]
                twice = sorted({f for f in fields if folded.count(f.casefold()) > 1})
                if twice:  # no row can be read right: refused, or (skipping bad lines) the table is left out
                    out.fail(path, lineno, f"the header names {', '.join(twice)} more than once")
                    return out.result()
                continue
        if fields is not None and len(cells) != len(fields):
            out.fail(path, lineno, f"{len(cells)} columns where the header (line {header_line}) has {len(fields)}")
            continue
        if fields is None and not 2 <= len(cells) <= len(POSITIONAL):
            out.fail(path, lineno, f"{len(cells)} column(s): without a header line a row is id, name and an optional "
                                   "description; name the columns in a first line (id, name, aliases, types, description)")
            continue
        out.add(_entity(fields or list(POSITIONAL), cells), path, lineno)
    return out.result()


@register_kb_reader("csv")
def read_csv(path: PathLike, bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    """A comma-separated table of entities (RFC 4180 quoting); see the module."""
    return read_table(path, tab=False, bad_lines=bad_lines)


@register_kb_reader("tsv")
def read_tsv(path: PathLike, bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    """A tab-separated table of entities (no quoting); see the module."""
    return read_table(path, tab=True, bad_lines=bad_lines)
