"""The KB record (:class:`Entity`) and what every reader shares.

:func:`normalize` is the lookup key of a name; :class:`KBFormatError` the error every reader raises
(``FILE:LINE: reason``); :class:`Collector` keeps a reader's entities in file order and refuses an empty
id or name, an id holding ``|``, ``,``, ``+`` or a control or line-breaking character (a tab, a line break) or
spelling NIL (``-1``, ``-``, ``NIL``), a NUL character and a duplicate id,
and warns of an alternative id listed by two entities; :func:`nonblank_lines`, :func:`unique` and
:func:`split` are the small text helpers the readers use.
"""
from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Tuple, Union

from .. import files

PathLike = Union[str, Path]

_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)
# invisible format characters a PDF or a web page leaves inside words: soft hyphen, zero-width space / (non-)joiner,
# left-to-right / right-to-left marks, word joiner, invisible operators, zero-width no-break space (BOM)
_INVISIBLE = re.compile("[\u00ad\u200b-\u200f\u2060-\u2064\ufeff]")
ID_SEP = "|"  # joins the ids of a composite mention in a corpus (corpora.ID_SEP): never in a KB id
ID_SEPARATORS = "|,+"  # what corpus readers split an id column on (BioRED writes A,B and NCBI A+B): none in a KB id
_CONTROL_CATEGORIES = ("Cc", "Zl", "Zp")  # control characters (tab, CR, LF, NEL, NUL…), U+2028, U+2029
NIL_IDS = ("-1", "-", "NIL")  # what corpora and the linker write for "no entry" (corpora.NO_ID, corpora.NIL): no KB id
log = logging.getLogger(__name__)


def normalize(text: str) -> str:
    """The lookup key of a name or surface form: composed (Unicode NFC: ``o`` + U+0308 is ``ö``, as text from
    macOS or a PDF spells it), invisible characters dropped (a soft hyphen or zero-width space inside a word
    does not split it), case-folded, runs of punctuation/space → one space."""
    if not text.isascii():
        text = _INVISIBLE.sub("", unicodedata.normalize("NFC", text))
    return _NON_WORD.sub(" ", text.casefold()).strip()


def control_character(text: str) -> Optional[str]:
    """The first control or line-separating character of ``text`` (a tab, CR, LF, NEL, U+2028…: Unicode
    categories Cc, Zl, Zp), None if it holds none: no id of a KB, a corpus or an id map holds one."""
    return next((c for c in text if unicodedata.category(c) in _CONTROL_CATEGORIES), None)


def id_problem(entity_id: str) -> Optional[str]:
    """Why ``entity_id`` cannot be a KB id (None if it can): a corpus or a linked file would read it back
    as something else."""
    sep = next((c for c in ID_SEPARATORS if c in entity_id), None)
    if sep is not None:
        return (f"holds {sep!r}, which separates the ids of a composite mention in a corpus (A|B, A,B, A+B): "
                "it would be read as several ids")
    control = control_character(entity_id)
    if control is not None:
        return (f"holds {control!r} (U+{ord(control):04X}), a control or line-breaking character: a tab-separated "
                "corpus or linked file (PubTator) would read it back as another id, or not at all")
    if entity_id in NIL_IDS:
        return "is how a corpus or a linked file says NIL (no entry): a mention linked to it would be read back as NIL"
    return None


def alt_ids_problem(entity: Entity) -> Optional[str]:
    """Why the entity's ``extra["alt_ids"]`` (the ids a corpus of an older release may use for it) cannot be
    read, None if they can; they are made a list of stripped ids first: a table's column or a JSON string of
    ids joined by ``|`` is split (a string was read character by character, each letter an alternative id)."""
    value = entity.extra.get("alt_ids")
    if value is None:
        return None
    alt = value.split("|") if isinstance(value, str) else value
    if not isinstance(alt, (list, tuple)) or not all(isinstance(a, str) for a in alt):
        return f"extra.alt_ids must be a list of ids (in a table: ids joined by |), not {value!r}"
    alt = list(dict.fromkeys(a.strip() for a in alt if a.strip()))
    bad = next(((a, why) for a in alt if (why := id_problem(a)) is not None), None)
    if bad is not None:
        return f"alternative id {bad[0]!r} {bad[1]}"
    if alt:
        entity.extra["alt_ids"] = alt
    else:
        del entity.extra["alt_ids"]
    return None


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


def unique(items: Iterable[str], exclude: str = "") -> List[str]:
    """The stripped, non-empty items in order, each once, without ``exclude`` (the entity's name)."""
    seen, out = {exclude}, []
    for item in items:
        item = item.strip()
        if item and item not in seen:
            seen.add(item)
            out.append(item)
    return out


def split(field_text: str, sep: str = "|") -> List[str]:
    """The non-empty, stripped parts of a ``sep``-separated field."""
    return [x.strip() for x in field_text.split(sep) if x.strip()]


def nonblank_lines(path: Path, bad_lines: Optional[files.BadLines]) -> Iterator[Tuple[int, str]]:
    """``(line number, line)`` of each non-blank line, read as :func:`files.read_lines` does."""
    for lineno, line in files.read_lines(path, KBFormatError, bad_lines):
        if line.strip():
            yield lineno, line


class Collector:
    """Keeps entities in file order and refuses a duplicate id, naming both lines; strips the id and name
    (a duplicate is one after stripping) and refuses an id holding one of :data:`ID_SEPARATORS`. An
    alternative id listed by two entities (an old id split in two) is not refused: it resolves to the first
    in file order, and :meth:`result` warns once, naming both lines of the first few.

    With ``bad_lines`` a refused entity is recorded there and left out; without, it raises.
    """

    def __init__(self, bad_lines: Optional[files.BadLines] = None):
        self.entities: Dict[str, Entity] = {}
        self.where: Dict[str, str] = {}
        self.bad_lines = bad_lines
        self.alt_owner: Dict[str, str] = {}  # alternative id → the first entity listing it
        self.alt_conflicts: List[str] = []

    def fail(self, path: PathLike, line: int, message: str) -> None:
        files.reject(KBFormatError(path, line, message), self.bad_lines)

    def add(self, entity: Entity, path: PathLike, line: int) -> None:
        entity.id, entity.name = entity.id.strip(), entity.name.strip()  # as a corpus's ids are read
        if not entity.id or not entity.name:
            return self.fail(path, line, "entity needs a non-empty id and name")
        problem = id_problem(entity.id)
        if problem is not None:
            return self.fail(path, line, f"entity id {entity.id!r} {problem}")
        texts = (entity.id, entity.name, *entity.aliases, *entity.types, entity.description)
        if any("\x00" in t for t in texts):  # every reader, as the JSONL reader always did
            return self.fail(path, line, "a NUL character in the entity's id, name, synonyms, types or description")
        alt = alt_ids_problem(entity)
        if alt is not None:
            return self.fail(path, line, alt)
        if entity.id in self.entities:
            return self.fail(
                path, line, f"duplicate entity id {entity.id!r} (first seen at {self.where[entity.id]})"
            )
        for alt in entity.extra.get("alt_ids") or []:
            first = self.alt_owner.setdefault(alt, entity.id)
            if first != entity.id:
                self.alt_conflicts.append(f"{alt} of {first} ({self.where[first]}) and of {entity.id} ({path}:{line})")
        self.entities[entity.id] = entity
        self.where[entity.id] = f"{path}:{line}"

    def result(self) -> List[Entity]:
        if self.alt_conflicts:
            shown = self.alt_conflicts[:3]
            more = f" (first {len(shown)} shown)" if len(self.alt_conflicts) > len(shown) else ""
            log.warning("%d alternative id(s) listed by two entities, each resolving to the first listed%s: %s",
                        len(self.alt_conflicts), more, "; ".join(shown))
        return list(self.entities.values())


def require_trainable(entities: List[Entity], path: PathLike) -> List[Entity]:
    """``entities`` if a training can learn from them, else :class:`files.InputError`: training (``adapt``,
    ``train`` with an entity tower that learns) takes other entities' names as each one's negatives."""
    if len(entities) < 2:
        raise files.InputError(f"{path}: {len(entities)} entit{'y' if len(entities) == 1 else 'ies'}; training needs at "
                               "least 2 (other entities' names are each one's negatives)")
    return entities
