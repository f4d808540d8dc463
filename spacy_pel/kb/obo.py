"""OBO 1.2/1.4 ontologies (``obo``): ``[Term]`` stanzas."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional

from .. import files
from .entity import Collector, Entity, KBFormatError, PathLike, unique
from .registry import register_kb_reader

_OBO_QUOTED = re.compile(r'^"((?:[^"\\]|\\.)*)"')
# what a trailing comment is looked for past: a quoted string (escaped quotes in it), an escaped
# character, or the comment's start, `` ! `` (a `!` between white space, or ending the line)
_OBO_COMMENT = re.compile(r'"(?:[^"\\]|\\.)*"|\\.|\s!(?=\s|$)')
_OBO_TAG = re.compile(r"^[A-Za-z0-9_-]+$")
OBO_STANZAS = ("Term", "Typedef", "Instance")
_OBO_SINGLE = ("id", "name", "def")  # tags a stanza may have once: a second one is refused, not kept
# OBO 1.2's synonym tags, one per scope (1.4 writes ``synonym: "…" SCOPE``): read as synonyms, as 1.2 asks
_OBO_OLD_SYNONYMS = ("exact_synonym", "related_synonym", "narrow_synonym", "broad_synonym")
_OBO_ESCAPE = re.compile(r"\\(.)")
_OBO_ESCAPED = {"n": "\n", "t": "\t", "W": " "}  # any other escaped character stands for itself (\", \\, \!, \: …)


def unescape(text: str) -> str:
    """An OBO value's text with its escapes read: ``\\n`` a line break, ``\\t`` a tab, ``\\W`` a space, and a
    backslash before any other character (``\\"``, ``\\\\``, ``\\!``, ``\\:``, ``\\,`` …) dropped."""
    return _OBO_ESCAPE.sub(lambda m: _OBO_ESCAPED.get(m.group(1), m.group(1)), text) if "\\" in text else text


def without_comment(value: str) -> str:
    """A tag's value without its trailing ``! comment``: a `` ! `` outside quoted strings (OBO 1.4: a
    ``def`` or ``synonym`` text may hold `` ! `` and escaped quotes ``\\"``; ``\\!`` is no comment)."""
    for match in _OBO_COMMENT.finditer(value):
        if not match.group().startswith(('"', "\\")):
            return value[: match.start()]
    return value


@register_kb_reader("obo")
def read_obo(path: PathLike, bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    """OBO 1.2/1.4 ``[Term]`` stanzas: id, name, synonyms (1.2's ``exact_synonym`` … tags too), def, namespace (a term without one takes the
    header's ``default-namespace``, as the format says: HPO's terms are all ``human_phenotype``), alt_id
    (→ ``extra["alt_ids"]``); obsolete terms skipped, except that an obsolete term's id with one
    ``replaced_by`` becomes an alternative id of the term that replaces it (followed through further
    obsolete terms), so a corpus annotated with an older release resolves to the current term; an
    obsolete term with only ``consider`` suggestions (several, or none) resolves to nothing.

    Escapes are read (:func:`unescape`). A stanza header other than ``[Term]``, ``[Typedef]`` or ``[Instance]``, a line that is not
    ``tag: value``, and a second ``id``, ``name`` or ``def`` in one stanza are refused.
    """
    path = Path(path)
    out = Collector(bad_lines)
    stanza: Optional[dict] = None
    header: dict = {}
    replaced: dict = {}  # obsolete term id → the id its one replaced_by names

    def flush():
        if stanza and stanza["kind"] == "Term" and stanza["obsolete"]:
            if "id" in stanza and len(stanza["replaced_by"]) == 1:
                for old in [stanza["id"], *stanza["alt_ids"]]:
                    replaced.setdefault(old, stanza["replaced_by"][0])
        elif stanza and stanza["kind"] == "Term":
            if "id" not in stanza or "name" not in stanza:
                return out.fail(path, stanza["line"], "[Term] stanza without id or name")
            entity = Entity(
                stanza["id"],
                stanza["name"],
                unique(stanza["synonyms"], stanza["name"]),
                stanza["types"] or header.get("default-namespace", []),
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
            opening = line.split(" !")[0].rstrip()
            kind = opening[1:-1].strip() if opening.endswith("]") else None
            # a stanza whose header is refused is read (so its lines are not mistaken for another
            # stanza's) but yields nothing; the refusal is its one report
            stanza = {"kind": None, "line": lineno, "synonyms": [], "types": [], "alt_ids": [], "obsolete": False,
                      "replaced_by": []}
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
        value = without_comment(value).strip()
        quoted = tag in ("synonym", "def", *_OBO_OLD_SYNONYMS)
        value = value if quoted else unescape(value)  # a quoted text is unescaped once read out of its quotes
        if stanza is None and tag == "default-namespace" and value:
            header[tag] = [value]
        if stanza is None or stanza["kind"] is None:
            continue  # header tags, or a refused stanza's lines
        if tag in _OBO_SINGLE and tag in stanza:
            out.fail(path, lineno, f"second {tag!r} line in the stanza at line {stanza['line']} (one is allowed)")
            continue
        if tag in ("id", "name"):
            stanza[tag] = value
        elif quoted:
            match = _OBO_QUOTED.match(value)
            if not match:
                out.fail(path, lineno, f"{tag} value must start with a quoted string")
                continue
            text = unescape(match.group(1))
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
        elif tag == "replaced_by":
            stanza["replaced_by"].append(value)
    flush()
    return with_replaced_ids(out.result(), replaced)


def with_replaced_ids(entities: List[Entity], replaced: Dict[str, str]) -> List[Entity]:
    """Each obsolete id of ``replaced`` added to the alt ids of the entity its chain of ``replaced_by``
    ends at (a chain that loops, or ends at no entity of ``entities``, adds nothing)."""
    by_id = {e.id: e for e in entities}
    for old in sorted(replaced):
        target, seen = replaced[old], {old}
        while target not in by_id and target in replaced and target not in seen:
            seen.add(target)
            target = replaced[target]
        entity = by_id.get(target)
        if entity is not None and old not in by_id:
            alt_ids = entity.extra.setdefault("alt_ids", [])
            if old not in alt_ids:
                alt_ids.append(old)
    return entities
