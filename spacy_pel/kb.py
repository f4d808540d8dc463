"""Knowledge-base records and readers for the KB file formats spacy_pel accepts.

The canonical format is JSONL, one entity per line::

    {"id": "D008094", "name": "Lithium", "aliases": ["Li"], "types": ["Chemicals and Drugs"],
     "description": "", "extra": {"tree_numbers": ["D01.268.556.579"]}}

Only ``id`` and ``name`` are required. Readers also exist for the MeSH TSV exports (descriptors and
supplementary concept records), the CTD MEDIC vocabulary and OBO ontologies. Every reader raises
:class:`KBFormatError` naming the file and line (``FILE:LINE: reason``) for a malformed line, a byte
that is not UTF-8 or a duplicate id — or, given ``bad_lines``, counts the line there and skips it.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from . import files

PathLike = Union[str, Path]

# First letter of a MeSH tree number → top-level category (MeSH's own labels).
MESH_BRANCHES = {
    "A": "Anatomy",
    "B": "Organisms",
    "C": "Diseases",
    "D": "Chemicals and Drugs",
    "E": "Analytical, Diagnostic and Therapeutic Techniques, and Equipment",
    "F": "Psychiatry and Psychology",
    "G": "Phenomena and Processes",
    "H": "Disciplines and Occupations",
    "I": "Anthropology, Education, Sociology, and Social Phenomena",
    "J": "Technology, Industry, and Agriculture",
    "K": "Humanities",
    "L": "Information Science",
    "M": "Named Groups",
    "N": "Health Care",
    "V": "Publication Characteristics",
    "Z": "Geographicals",
}
MESH_DESCRIPTOR_FILE = "mesh_id_label_mappings.tsv"
MESH_SUPPLEMENTARY_FILE = "mesh_supp_id_label_mappings.tsv"


_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def normalize(text: str) -> str:
    """The lookup key of a name or surface form: case-folded, runs of punctuation/space → one space."""
    return _NON_WORD.sub(" ", text.casefold()).strip()


class KBFormatError(files.LineError):
    """A KB file could not be read; the message names the file and the line (``FILE:LINE: reason``)."""


@dataclass
class Entity:
    """One KB entry. ``extra`` keeps format-specific facts (tree numbers, alternative ids)."""

    id: str
    name: str
    aliases: List[str] = field(default_factory=list)
    types: List[str] = field(default_factory=list)
    description: str = ""
    extra: Dict[str, object] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Entity":
        return cls(
            id=data["id"],
            name=data["name"],
            aliases=list(data.get("aliases") or []),
            types=list(data.get("types") or []),
            description=data.get("description") or "",
            extra=dict(data.get("extra") or {}),
        )


def _unique(items: Iterable[str], exclude: str = "") -> List[str]:
    seen, out = {exclude}, []
    for item in items:
        item = item.strip()
        if item and item not in seen:
            seen.add(item)
            out.append(item)
    return out


def _lines(path: Path, bad_lines: Optional[files.BadLines]) -> Iterator[Tuple[int, str]]:
    for lineno, line in files.read_lines(path, KBFormatError, bad_lines):
        if line.strip():
            yield lineno, line


class _Collector:
    """Keeps entities in file order and refuses a duplicate id, naming both lines.

    With ``bad_lines`` a refused entity is recorded there and left out; without, it raises.
    """

    def __init__(self, bad_lines: Optional[files.BadLines] = None):
        self.entities: Dict[str, Entity] = {}
        self.where: Dict[str, str] = {}
        self.bad_lines = bad_lines

    def fail(self, path: PathLike, line: int, message: str) -> None:
        files.reject(KBFormatError(path, line, message), self.bad_lines)

    def add(self, entity: Entity, path: PathLike, line: int) -> None:
        if not entity.id.strip() or not entity.name.strip():
            return self.fail(path, line, "entity needs a non-empty id and name")
        texts = (entity.id, entity.name, *entity.aliases, *entity.types, entity.description)
        if any("\x00" in t for t in texts):  # every reader, as the JSONL reader always did
            return self.fail(path, line, "a NUL character in the entity's id, name, synonyms, types or description")
        if entity.id in self.entities:
            return self.fail(
                path, line, f"duplicate entity id {entity.id!r} (first seen at {self.where[entity.id]})"
            )
        self.entities[entity.id] = entity
        self.where[entity.id] = f"{path}:{line}"


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


def read_jsonl(path: PathLike, bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    path = Path(path)
    out = _Collector(bad_lines)
    for lineno, line in _lines(path, bad_lines):
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
        out.add(Entity.from_dict(data), path, lineno)
    return list(out.entities.values())


def write_jsonl(entities: Iterable[Entity], path: PathLike) -> None:
    """Entities as JSON lines (the KB's ``jsonl`` format), written atomically."""
    files.write_jsonl((e.to_dict() for e in entities), path)


_MESH_ID = re.compile(r"^[CD]\d{6,9}$")


def _split(field_text: str, sep: str = "|") -> List[str]:
    return [x.strip() for x in field_text.split(sep) if x.strip()]


def mesh_files(path: PathLike) -> List[Path]:
    """The MeSH TSV files a ``--format mesh`` path stands for (a folder holding both, or one file)."""
    path = Path(path)
    if not path.is_dir():
        return [path]
    found = [path / MESH_DESCRIPTOR_FILE, path / MESH_SUPPLEMENTARY_FILE]
    missing = [str(f) for f in found if not f.exists()]
    if missing:
        raise FileNotFoundError(f"MeSH folder lacks {', '.join(missing)}")
    return found


def read_mesh(path: PathLike, bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    """MeSH TSV exports: a folder holding both files, or either file alone.

    Descriptors: ``id name synonyms tree-numbers taxon-ids``. Supplementary records:
    ``id name synonyms mapped-descriptor-ids``; their types are the branches of the descriptors they
    map to. Upstream has one supplementary line with a tab inside its synonyms: extra middle columns
    are read as further synonyms rather than refused.
    """
    out = _Collector(bad_lines)
    descriptor_types: Dict[str, List[str]] = {}
    pending: List[Entity] = []
    for file in mesh_files(path):
        for lineno, line in _lines(file, bad_lines):
            cols = line.split("\t")
            if len(cols) < 4 or not _MESH_ID.match(cols[0].strip()) or not cols[1].strip():
                out.fail(file, lineno, "expected a MeSH id (D…/C…), a name and at least 4 tab-separated columns")
                continue
            mesh_id, name = cols[0].strip(), cols[1].strip()
            if mesh_id.startswith("D"):
                if len(cols) > 5:
                    out.fail(file, lineno, f"a descriptor line has at most 5 tab-separated columns, not {len(cols)}")
                    continue
                trees = _split(cols[3])
                types = _unique(MESH_BRANCHES.get(t[0], t[0]) for t in trees)
                extra: Dict[str, object] = {"tree_numbers": trees}
                if len(cols) > 4 and cols[4].strip():
                    extra["taxon_ids"] = _split(cols[4])
                entity = Entity(mesh_id, name, _unique(_split(cols[2]), name), types, extra=extra)
            else:
                synonyms = [s for col in cols[2:-1] for s in _split(col.strip('"'))]
                mapped = [m.strip().lstrip("*") for m in cols[-1].split(",") if m.strip()]
                entity = Entity(mesh_id, name, _unique(synonyms, name), [], extra={"mapped_to": mapped})
            before = len(out.entities)
            out.add(entity, file, lineno)
            if len(out.entities) > before and mesh_id.startswith("D"):
                descriptor_types[mesh_id] = entity.types
            elif len(out.entities) > before:
                pending.append(entity)
    for entity in pending:
        entity.types = _unique(t for d in entity.extra["mapped_to"] for t in descriptor_types.get(d, []))
    return list(out.entities.values())


def read_medic(path: PathLike, bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    """CTD MEDIC: ``ids||name|synonym|…``; ids are ``|``-separated MeSH ids and/or OMIM numbers.

    The entity id is the MeSH id when there is one, else ``OMIM:<n>``; the other ids go to
    ``extra["alt_ids"]``.
    """
    path = Path(path)
    out = _Collector(bad_lines)
    for lineno, line in _lines(path, bad_lines):
        if line.startswith("#"):
            continue
        if "||" not in line:
            out.fail(path, lineno, "expected 'ids||name|synonyms'")
            continue
        id_part, names_part = line.split("||", 1)
        ids = [i if not i.isdigit() else f"OMIM:{i}" for i in _split(id_part)]
        names = _split(names_part)
        if not ids or not names:
            out.fail(path, lineno, "expected at least one id and a name")
            continue
        mesh = [i for i in ids if _MESH_ID.match(i) or i.startswith("MESH:")]
        primary = (mesh or ids)[0]
        entity = Entity(primary, names[0], _unique(names[1:], names[0]), ["Diseases"])
        alt = [i for i in ids if i != primary]
        if alt:
            entity.extra["alt_ids"] = alt
        out.add(entity, path, lineno)
    return list(out.entities.values())


_OBO_QUOTED = re.compile(r'^"((?:[^"\\]|\\.)*)"')
_OBO_TAG = re.compile(r"^[A-Za-z0-9_-]+$")
OBO_STANZAS = ("Term", "Typedef", "Instance")
_OBO_SINGLE = ("id", "name", "def")  # tags a stanza may have once: a second one is refused, not kept


def read_obo(path: PathLike, bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    """OBO 1.2/1.4 ``[Term]`` stanzas: id, name, synonyms, def, namespace, alt_id (→ ``extra["alt_ids"]``);
    obsolete terms skipped.

    A stanza header other than ``[Term]``, ``[Typedef]`` or ``[Instance]``, a line that is not
    ``tag: value``, and a second ``id``, ``name`` or ``def`` in one stanza are refused.
    """
    path = Path(path)
    out = _Collector(bad_lines)
    stanza: Optional[dict] = None

    def flush():
        if stanza and stanza["kind"] == "Term" and not stanza["obsolete"]:
            if "id" not in stanza or "name" not in stanza:
                return out.fail(path, stanza["line"], "[Term] stanza without id or name")
            entity = Entity(
                stanza["id"],
                stanza["name"],
                _unique(stanza["synonyms"], stanza["name"]),
                stanza["types"],
                stanza.get("def", ""),
                {"alt_ids": stanza["alt_ids"]} if stanza["alt_ids"] else {},
            )
            out.add(entity, path, stanza["line"])

    for lineno, raw in files.read_lines(path, KBFormatError, bad_lines):
        line = raw.strip()
        if not line or line.startswith("!"):
            continue
        if line.startswith("["):
            flush()
            header = line.split(" !")[0].rstrip()
            kind = header[1:-1].strip() if header.endswith("]") else None
            # a stanza whose header is refused is read (so its lines are not mistaken for another
            # stanza's) but yields nothing; the refusal is its one report
            stanza = {"kind": None, "line": lineno, "synonyms": [], "types": [], "alt_ids": [], "obsolete": False}
            if kind is None:
                out.fail(path, lineno, f"malformed stanza header {line[:40]!r} (expected e.g. [Term])")
            elif kind not in OBO_STANZAS:
                out.fail(path, lineno, f"unknown stanza type [{kind}] (expected {', '.join(OBO_STANZAS)})")
            else:
                stanza["kind"] = kind
            continue
        tag, sep, value = line.partition(":")
        if not sep or not _OBO_TAG.match(tag):
            out.fail(path, lineno, "expected 'tag: value'")
            continue
        if stanza is None or stanza["kind"] is None:
            continue  # header tags, or a refused stanza's lines
        value = value.split(" ! ")[0].strip()
        if tag in _OBO_SINGLE and tag in stanza:
            out.fail(path, lineno, f"second {tag!r} line in the stanza at line {stanza['line']} (one is allowed)")
            continue
        if tag in ("id", "name"):
            stanza[tag] = value
        elif tag in ("synonym", "def"):
            match = _OBO_QUOTED.match(value)
            if not match:
                out.fail(path, lineno, f"{tag} value must start with a quoted string")
                continue
            text = match.group(1).replace('\\"', '"')
            if tag == "def":
                stanza["def"] = text
            else:
                stanza["synonyms"].append(text)
        elif tag == "namespace":
            stanza["types"].append(value)
        elif tag == "alt_id":
            stanza["alt_ids"].append(value)
        elif tag == "is_obsolete":
            stanza["obsolete"] = value.lower() == "true"
    flush()
    return list(out.entities.values())


READERS: Dict[str, Callable[..., List[Entity]]] = {
    "jsonl": read_jsonl,
    "mesh": read_mesh,
    "medic": read_medic,
    "obo": read_obo,
}


def kb_files(path: PathLike, format: str) -> List[Path]:
    """The files a KB path stands for (a MeSH folder is two files); refuses a missing path."""
    if format not in READERS:
        raise files.InputError(f"unknown KB format {format!r}; choose one of {', '.join(sorted(READERS))}")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"KB file not found: {path}")
    found = mesh_files(path) if format == "mesh" else [path]
    for file in found:
        if file.is_dir():
            raise files.InputError(f"{file} is a folder, not a {format} KB file")
    return found


def read_kb(path: PathLike, format: str = "jsonl", bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    """Read a KB file (or MeSH folder) in one of :data:`READERS`' formats.

    A malformed line raises :class:`KBFormatError` (``FILE:LINE: reason``), unless ``bad_lines`` is
    given: then each malformed line is recorded there and left out. A KB without any entity is
    refused either way.
    """
    kb_files(path, format)
    entities = READERS[format](path, bad_lines=bad_lines)
    if not entities:
        skipped = f" ({bad_lines.count} malformed line(s) skipped)" if bad_lines is not None and bad_lines.count else ""
        raise KBFormatError(path, 1, f"no entities in this {format} KB{skipped}")
    return entities
