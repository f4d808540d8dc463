"""UMLS Metathesaurus release files (``umls``): ``MRCONSO.RRF``, with ``MRSTY.RRF`` and ``MRDEF.RRF``.

A ``--format umls`` path is a release's ``META`` folder (or its ``MRCONSO.RRF``); the semantic types
(``MRSTY.RRF``) and definitions (``MRDEF.RRF``) are read when they lie beside it. One entity per
concept (CUI):

* its names: the English atoms that the release does not suppress (``LAT`` ``ENG``; ``SUPPRESS`` ``N``:
  ``O`` obsolete, ``E``/``Y`` suppressed are left out), each spelling once whatever its case (the
  encoders are uncased; UMLS lists ``Heart attack`` and ``HEART ATTACK`` as two atoms);
* its name: the concept's preferred atom (``TS=P``, ``STT=PF``, ``ISPREF=Y``), else its first;
* its types: the semantic type names of ``MRSTY.RRF`` (``Disease or Syndrome``) — what the
  ``label_types`` rule maps span labels to;
* its description: the first unsuppressed definition in ``MRDEF.RRF``, if any (the entity tower reads
  it for a concept without synonyms, as an OBO ``def``: the encoder's ``entity_text``);
* ids are bare CUIs (``C0027051``): a corpus that writes ``UMLS:C0027051`` (MedMentions) is converted
  with ``convert --strip-id-prefix UMLS:``.

A concept with no English, unsuppressed atom is not in the KB. To keep some sources only (``SAB``), filter
``MRCONSO.RRF`` first (e.g. ``awk -F'|' '$12 == "MSH" || $12 == "SNOMEDCT_US"'``) or register a reader of
your own (:mod:`.registry`). Field layouts: the UMLS Reference Manual, "Metathesaurus – Rich Release Format".
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional

from .. import files
from .entity import Collector, Entity, PathLike, nonblank_lines
from .registry import register_kb_reader

UMLS_CONCEPTS = "MRCONSO.RRF"
UMLS_TYPES = "MRSTY.RRF"
UMLS_DEFINITIONS = "MRDEF.RRF"
CUI = re.compile(r"^C\d{7}$")
# MRCONSO: CUI|LAT|TS|LUI|STT|SUI|ISPREF|AUI|SAUI|SCUI|SDUI|SAB|TTY|CODE|STR|SRL|SUPPRESS|CVF| (18 fields)
CONSO_FIELDS, CONSO_CUI, CONSO_LAT, CONSO_TS, CONSO_STT, CONSO_ISPREF, CONSO_STR, CONSO_SUPPRESS = 18, 0, 1, 2, 4, 6, 14, 16
STY_FIELDS, STY_STY = 6, 3  # MRSTY: CUI|TUI|STN|STY|ATUI|CVF|
DEF_FIELDS, DEF_TEXT, DEF_SUPPRESS = 8, 5, 6  # MRDEF: CUI|AUI|ATUI|SATUI|SAB|DEF|SUPPRESS|CVF|
LANGUAGES = ("ENG",)
KEPT = ("N", "")  # SUPPRESS values of atoms kept (O: obsolete, E: suppressed by an editor, Y: by the source)


def umls_files(path: PathLike) -> List[Path]:
    """The release files a ``--format umls`` path stands for: ``MRCONSO.RRF`` (the path, or in the path's
    folder), then ``MRSTY.RRF`` and ``MRDEF.RRF`` where they are beside it."""
    path = Path(path)
    concepts = path / UMLS_CONCEPTS if path.is_dir() else path
    if not concepts.exists():
        raise FileNotFoundError(f"UMLS folder lacks {concepts}")
    return [concepts] + [concepts.parent / n for n in (UMLS_TYPES, UMLS_DEFINITIONS) if (concepts.parent / n).exists()]


def _fields(line: str, count: int) -> Optional[List[str]]:
    """A ``|``-terminated RRF line's ``count`` fields, or None when it has another number of them."""
    parts = line.rstrip("\r\n").split("|")
    if parts and parts[-1] == "":
        parts.pop()
    return parts if len(parts) == count else None


class _Concept:
    __slots__ = ("line", "name", "names", "keys", "types", "definition")

    def __init__(self, line: int):
        self.line, self.name, self.names, self.keys = line, "", [], set()
        self.types: List[str] = []
        self.definition = ""

    def add(self, text: str, preferred: bool) -> None:
        key = text.casefold()
        if preferred and not self.name:
            self.name = text
        if key not in self.keys:
            self.keys.add(key)
            self.names.append(text)


def _read_concepts(file: Path, out: Collector) -> Dict[str, _Concept]:
    concepts: Dict[str, _Concept] = {}
    for lineno, line in nonblank_lines(file, out.bad_lines):
        f = _fields(line, CONSO_FIELDS)
        if f is None or not CUI.match(f[CONSO_CUI]) or not f[CONSO_STR].strip():
            out.fail(file, lineno, f"expected an MRCONSO line: {CONSO_FIELDS} |-terminated fields, a CUI (C + 7 digits) first "
                     "and the string (STR) 15th")
            continue
        if f[CONSO_LAT] not in LANGUAGES or f[CONSO_SUPPRESS] not in KEPT:
            continue
        concept = concepts.get(f[CONSO_CUI])
        if concept is None:
            concept = concepts[f[CONSO_CUI]] = _Concept(lineno)
        preferred = f[CONSO_TS] == "P" and f[CONSO_STT] == "PF" and f[CONSO_ISPREF] == "Y"
        concept.add(f[CONSO_STR].strip(), preferred)
    return concepts


def _read_extra(file: Path, concepts: Dict[str, _Concept], out: Collector) -> None:
    """Semantic types (MRSTY) or definitions (MRDEF) of the concepts read."""
    types = file.name == UMLS_TYPES
    count = STY_FIELDS if types else DEF_FIELDS
    for lineno, line in nonblank_lines(file, out.bad_lines):
        f = _fields(line, count)
        if f is None or not CUI.match(f[0]):
            out.fail(file, lineno, f"expected a {file.name} line: {count} |-terminated fields, a CUI first")
            continue
        concept = concepts.get(f[0])
        if concept is None:
            continue
        if types:
            if f[STY_STY] and f[STY_STY] not in concept.types:
                concept.types.append(f[STY_STY])
        elif not concept.definition and f[DEF_SUPPRESS] in KEPT and f[DEF_TEXT].strip():
            concept.definition = f[DEF_TEXT].strip()


@register_kb_reader("umls", files=umls_files)
def read_umls(path: PathLike, bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    """UMLS ``MRCONSO.RRF`` (+ ``MRSTY.RRF``, ``MRDEF.RRF`` beside it): one entity per CUI with an English,
    unsuppressed atom (see the module's docstring); concepts in the order of their first such atom."""
    out = Collector(bad_lines)
    found = umls_files(path)
    concepts = _read_concepts(found[0], out)
    for file in found[1:]:
        _read_extra(file, concepts, out)
    for cui, c in concepts.items():
        name = c.name or c.names[0]
        aliases = [n for n in c.names if n.casefold() != name.casefold()]
        out.add(Entity(cui, name, aliases, c.types, c.definition), found[0], c.line)
    return out.result()
