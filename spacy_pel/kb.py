"""Knowledge-base records and readers for the KB file formats spacy_pel accepts.

The canonical format is JSONL, one entity per line::

    {"id": "D008094", "name": "Lithium", "aliases": ["Li"], "types": ["Chemicals and Drugs"],
     "description": "", "extra": {"tree_numbers": ["D01.268.556.579"]}}

Only ``id`` and ``name`` are required. Readers also exist for the MeSH TSV exports (descriptors and
supplementary concept records), the CTD MEDIC vocabulary and OBO ontologies. Every reader raises
:class:`KBFormatError` naming the file and line for a malformed line or a duplicate id.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Union

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


class KBFormatError(ValueError):
    """A KB file could not be read; the message names the file and the line."""

    def __init__(self, path: PathLike, line: int, message: str):
        self.path, self.line = str(path), line
        super().__init__(f"{path}:{line}: {message}")


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


def _lines(path: Path) -> Iterator[tuple]:
    with path.open(encoding="utf8") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip("\n").rstrip("\r")
            if line.strip():
                yield lineno, line


class _Collector:
    """Keeps entities in file order and refuses a duplicate id, naming both lines."""

    def __init__(self):
        self.entities: Dict[str, Entity] = {}
        self.where: Dict[str, str] = {}

    def add(self, entity: Entity, path: PathLike, line: int) -> None:
        if not entity.id or not entity.name:
            raise KBFormatError(path, line, "entity needs a non-empty id and name")
        if entity.id in self.entities:
            raise KBFormatError(
                path, line, f"duplicate entity id {entity.id!r} (first seen at {self.where[entity.id]})"
            )
        self.entities[entity.id] = entity
        self.where[entity.id] = f"{path}:{line}"


def read_jsonl(path: PathLike) -> List[Entity]:
    path = Path(path)
    out = _Collector()
    for lineno, line in _lines(path):
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            raise KBFormatError(path, lineno, f"invalid JSON: {err.msg}") from None
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not isinstance(
            data.get("name"), str
        ):
            raise KBFormatError(path, lineno, 'each line must be an object with string "id" and "name"')
        for key in ("aliases", "types"):
            if key in data and not (
                isinstance(data[key], list) and all(isinstance(x, str) for x in data[key])
            ):
                raise KBFormatError(path, lineno, f'"{key}" must be a list of strings')
        out.add(Entity.from_dict(data), path, lineno)
    return list(out.entities.values())


def write_jsonl(entities: Iterable[Entity], path: PathLike) -> None:
    """Entities as JSON lines (the KB's ``jsonl`` format), written atomically."""
    files.write_jsonl((e.to_dict() for e in entities), path)


_MESH_ID = re.compile(r"^[CD]\d{6,9}$")


def _split(field_text: str, sep: str = "|") -> List[str]:
    return [x.strip() for x in field_text.split(sep) if x.strip()]


def read_mesh(path: PathLike) -> List[Entity]:
    """MeSH TSV exports: a folder holding both files, or either file alone.

    Descriptors: ``id name synonyms tree-numbers taxon-ids``. Supplementary records:
    ``id name synonyms mapped-descriptor-ids``; their types are the branches of the descriptors they
    map to. Upstream has one supplementary line with a tab inside its synonyms: extra middle columns
    are read as further synonyms rather than refused.
    """
    path = Path(path)
    if path.is_dir():
        files = [path / MESH_DESCRIPTOR_FILE, path / MESH_SUPPLEMENTARY_FILE]
        missing = [str(f) for f in files if not f.exists()]
        if missing:
            raise FileNotFoundError(f"MeSH folder lacks {', '.join(missing)}")
    else:
        files = [path]
    out = _Collector()
    descriptor_types: Dict[str, List[str]] = {}
    pending: List[tuple] = []
    for file in files:
        for lineno, line in _lines(file):
            cols = line.split("\t")
            if len(cols) < 4 or not _MESH_ID.match(cols[0].strip()) or not cols[1].strip():
                raise KBFormatError(
                    file, lineno, "expected a MeSH id (D…/C…), a name and at least 4 tab-separated columns"
                )
            mesh_id, name = cols[0].strip(), cols[1].strip()
            if mesh_id.startswith("D"):
                trees = _split(cols[3])
                types = _unique(MESH_BRANCHES.get(t[0], t[0]) for t in trees)
                descriptor_types[mesh_id] = types
                extra = {"tree_numbers": trees}
                if len(cols) > 4 and cols[4].strip():
                    extra["taxon_ids"] = _split(cols[4])
                entity = Entity(mesh_id, name, _unique(_split(cols[2]), name), types, extra=extra)
            else:
                synonyms = [s for col in cols[2:-1] for s in _split(col.strip('"'))]
                mapped = [m.strip().lstrip("*") for m in cols[-1].split(",") if m.strip()]
                entity = Entity(mesh_id, name, _unique(synonyms, name), [], extra={"mapped_to": mapped})
                pending.append(entity)
            out.add(entity, file, lineno)
    for entity in pending:
        entity.types = _unique(t for d in entity.extra["mapped_to"] for t in descriptor_types.get(d, []))
    return list(out.entities.values())


def read_medic(path: PathLike) -> List[Entity]:
    """CTD MEDIC: ``ids||name|synonym|…``; ids are ``|``-separated MeSH ids and/or OMIM numbers.

    The entity id is the MeSH id when there is one, else ``OMIM:<n>``; the other ids go to
    ``extra["alt_ids"]``.
    """
    path = Path(path)
    out = _Collector()
    for lineno, line in _lines(path):
        if line.startswith("#"):
            continue
        if "||" not in line:
            raise KBFormatError(path, lineno, "expected 'ids||name|synonyms'")
        id_part, names_part = line.split("||", 1)
        ids = [i if not i.isdigit() else f"OMIM:{i}" for i in _split(id_part)]
        names = _split(names_part)
        if not ids or not names:
            raise KBFormatError(path, lineno, "expected at least one id and a name")
        mesh = [i for i in ids if _MESH_ID.match(i) or i.startswith("MESH:")]
        primary = (mesh or ids)[0]
        entity = Entity(primary, names[0], _unique(names[1:], names[0]), ["Diseases"])
        alt = [i for i in ids if i != primary]
        if alt:
            entity.extra["alt_ids"] = alt
        out.add(entity, path, lineno)
    return list(out.entities.values())


_OBO_QUOTED = re.compile(r'^"((?:[^"\\]|\\.)*)"')


def read_obo(path: PathLike) -> List[Entity]:
    """OBO 1.2/1.4 ``[Term]`` stanzas: id, name, synonyms, def, namespace; obsolete terms skipped."""
    path = Path(path)
    out = _Collector()
    stanza: Optional[dict] = None

    def flush():
        if stanza and stanza["kind"] == "Term" and not stanza["obsolete"]:
            if "id" not in stanza or "name" not in stanza:
                raise KBFormatError(path, stanza["line"], "[Term] stanza without id or name")
            entity = Entity(
                stanza["id"],
                stanza["name"],
                _unique(stanza["synonyms"], stanza["name"]),
                stanza["types"],
                stanza.get("def", ""),
            )
            out.add(entity, path, stanza["line"])

    with path.open(encoding="utf8") as f:
        for lineno, raw in enumerate(f, start=1):
            line = raw.strip()
            if not line or line.startswith("!"):
                continue
            if line.startswith("[") and line.endswith("]"):
                flush()
                stanza = {"kind": line[1:-1], "line": lineno, "synonyms": [], "types": [], "obsolete": False}
                continue
            if stanza is None:
                continue  # header tags
            if ":" not in line:
                raise KBFormatError(path, lineno, "expected 'tag: value'")
            tag, value = line.split(":", 1)
            value = value.split(" ! ")[0].strip()
            if tag == "id":
                stanza["id"] = value
            elif tag == "name":
                stanza["name"] = value
            elif tag in ("synonym", "def"):
                match = _OBO_QUOTED.match(value)
                if not match:
                    raise KBFormatError(path, lineno, f"{tag} value must start with a quoted string")
                text = match.group(1).replace('\\"', '"')
                if tag == "def":
                    stanza["def"] = text
                else:
                    stanza["synonyms"].append(text)
            elif tag == "namespace":
                stanza["types"].append(value)
            elif tag == "is_obsolete":
                stanza["obsolete"] = value.lower() == "true"
    flush()
    return list(out.entities.values())


READERS: Dict[str, Callable[[PathLike], List[Entity]]] = {
    "jsonl": read_jsonl,
    "mesh": read_mesh,
    "medic": read_medic,
    "obo": read_obo,
}


def read_kb(path: PathLike, format: str = "jsonl") -> List[Entity]:
    """Read a KB file (or MeSH folder) in one of :data:`READERS`' formats."""
    if format not in READERS:
        raise ValueError(f"unknown KB format {format!r}; choose one of {sorted(READERS)}")
    if not Path(path).exists():
        raise FileNotFoundError(f"KB file not found: {path}")
    return READERS[format](path)
