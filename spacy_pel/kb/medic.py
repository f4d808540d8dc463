"""The CTD MEDIC disease vocabulary (``medic``)."""
from __future__ import annotations

import html
import re
from pathlib import Path
from typing import List, Optional

from .. import files
from .entity import Collector, Entity, PathLike, nonblank_lines, split, unique
from .mesh import MESH_ID
from .registry import register_kb_reader

# an OMIM title marked as included in another record (``MYOTONIA LEVIOR, INCLUDED``)
_INCLUDED = re.compile(r",\s*INCLUDED$")


def medic_names(field_text: str) -> List[str]:
    """The names of a MEDIC ``name|synonym|…`` field, as text: HTML entities decoded (``Sjogren&apos;s``
    → ``Sjogren's``), OMIM titles that MEDIC joins with ``;`` (``GSD II;ACID ALPHA-GLUCOSIDASE
    DEFICIENCY``) split into their own names, and OMIM's ``, INCLUDED`` mark dropped."""
    names = []
    for name in split(field_text):
        names.extend(_INCLUDED.sub("", part).strip() for part in html.unescape(name).split(";"))
    return unique(names)


@register_kb_reader("medic")
def read_medic(path: PathLike, bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    """CTD MEDIC: ``ids||name|synonym|…``; ids are ``|``-separated MeSH ids and/or OMIM numbers.

    The entity id is the MeSH id when there is one, else ``OMIM:<n>``; the other ids go to
    ``extra["alt_ids"]``. Names are read by :func:`medic_names`.
    """
    path = Path(path)
    out = Collector(bad_lines)
    for lineno, line in nonblank_lines(path, bad_lines):
        if line.startswith("#"):
            continue
        if "||" not in line:
            out.fail(path, lineno, "expected 'ids||name|synonyms'")
            continue
        id_part, names_part = line.split("||", 1)
        ids = [i if not i.isdigit() else f"OMIM:{i}" for i in split(id_part)]
        names = medic_names(names_part)
        if not ids or not names:
            out.fail(path, lineno, "expected at least one id and a name")
            continue
        mesh = [i for i in ids if MESH_ID.match(i) or i.startswith("MESH:")]
        primary = (mesh or ids)[0]
        entity = Entity(primary, names[0], unique(names[1:], names[0]), ["Diseases"])
        alt = [i for i in ids if i != primary]
        if alt:
            entity.extra["alt_ids"] = alt
        out.add(entity, path, lineno)
    return out.result()
