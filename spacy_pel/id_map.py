"""Gold ids annotated against an older version of the KB, mapped to the KB's current ids.

A corpus outlives the KB release it was annotated with: BC5CDR (2015) has ~170 dev mentions whose MeSH
supplementary records NLM has since merged into descriptors, so MeSH 2024 has no entry under those ids
and no pipeline can link them. ``convert --id-map FILE`` rewrites such gold ids while converting:

* ``FILE`` is tab-separated, one ``OLD_ID<TAB>NEW_ID`` a line (further columns are ignored, so a
  curated table with notes works as it is); blank lines, ``#`` comments and a header line
  ``old_id<TAB>new_id…`` (the first line that is neither blank nor a comment) are skipped (a header naming
  another second column is refused: its second column is not the new id). ``NEW_ID`` ``NIL`` (or ``-1`` / ``-``, as PubTator corpora write it) marks a
  retired record with no successor.
* every id of a mention is mapped (a composite mention's too); an id the map does not name stays;
* a malformed line (an id holding a control character: a lone CR of classic-Mac line ends makes the
  whole file one line), an old id mapped twice to different ids, or a map whose targets are themselves
  mapped (a chain) is refused with its ``FILE:LINE``;
* the counts of mentions changed, by old id, are part of the conversion statistics.

``convert --strip-id-prefix PREFIX`` (:func:`strip_prefixes`) removes a namespace a corpus writes before
its ids and the KB does not (MedMentions' ``UMLS:C0027051`` against a UMLS KB's ``C0027051``, PubTator3's
``MESH:D003920`` against MeSH's ``D003920``), before the id map is applied.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from . import files
from .corpora import NIL, NO_ID
from .kb.entity import control_character

HEADER, NEW_HEADER = "old_id", "new_id"
_CR_HINT = "; CR line ends? save the file with LF or CRLF line ends"


class IdMapError(files.LineError):
    """A malformed line of an id map file (``FILE:LINE: reason``)."""


def read_id_map(path: files.PathLike) -> Dict[str, str]:
    """``{old id: new id}`` from the tab-separated file ``path`` (see the module's docstring)."""
    mapping: Dict[str, str] = {}
    where: Dict[str, int] = {}
    first = True  # the first line that is neither blank nor a comment: a header, if it names old_id
    for lineno, line in files.read_lines(path, IdMapError):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split("\t")]
        header, first = first and fields[0].lower() == HEADER, False
        if header:
            if len(fields) < 2 or fields[1].lower() != NEW_HEADER:
                raise IdMapError(path, lineno, f"a header's second column must be {NEW_HEADER!r} "
                                 f"(found {fields[1] if len(fields) > 1 else 'none'!r}): the map is OLD_ID<TAB>NEW_ID"
                                 f"{_CR_HINT if chr(13) in line else ''}")
            continue
        if len(fields) < 2 or not fields[0] or not fields[1]:
            raise IdMapError(path, lineno, "expected OLD_ID<TAB>NEW_ID (tab-separated, both non-empty)")
        old, new = fields[0], NIL if fields[1] in NO_ID else fields[1]  # -1 / -: NIL, as corpora write it
        for value in (old, new):
            control = control_character(value)
            if control is not None:
                raise IdMapError(path, lineno, f"id {value!r} holds {control!r} (U+{ord(control):04X}), a control or "
                                 f"line-breaking character no KB id holds{_CR_HINT if control == chr(13) else ''}")
        if old == NIL or old in NO_ID:
            raise IdMapError(path, lineno, f"{old} cannot be mapped (it means NIL, not an id)")
        if old in mapping and mapping[old] != new:
            raise IdMapError(path, lineno, f"{old!r} is mapped to {mapping[old]!r} on line {where[old]} and to {new!r} here")
        mapping[old], where[old] = new, lineno
    for old, new in mapping.items():
        if new in mapping and new != old:
            raise IdMapError(path, where[old], f"{old!r} is mapped to {new!r}, which the map maps again "
                             f"(line {where[new]}): give the final id")
    return mapping


def map_ids(ids: List[str], mapping: Dict[str, str], counts: Optional[Dict[str, int]] = None) -> List[str]:
    """A mention's gold ids with every mapped one replaced (duplicates and mapped-away ``NIL`` parts
    dropped; all parts ``NIL``: ``["NIL"]``; no ids, a mention without any, ``""``: none); each old id
    replaced is counted in ``counts``."""
    if not ids:
        return []
    out: List[str] = []
    for i in ids:
        new = mapping.get(i, i)
        if new != i and counts is not None:
            counts[i] = counts.get(i, 0) + 1
        if new not in out:
            out.append(new)
    kept = [i for i in out if i != NIL]
    return kept or [NIL]


def strip_prefixes(ids: List[str], prefixes: Sequence[str], counts: Optional[Dict[str, int]] = None) -> List[str]:
    """A mention's gold ids with the first of ``prefixes`` each starts with removed (an id that is the
    prefix alone stays as it is); each id stripped is counted in ``counts``, by prefix."""
    out: List[str] = []
    for i in ids:
        prefix = next((p for p in prefixes if i.startswith(p) and len(i) > len(p)), None)
        if prefix is not None:
            i = i[len(prefix):]
            if counts is not None:
                counts[prefix] = counts.get(prefix, 0) + 1
        out.append(i)
    return out
