"""MeSH TSV exports (``mesh``): descriptors and supplementary concept records."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Optional

from .. import files
from .entity import Collector, Entity, PathLike, nonblank_lines, split, unique
from .registry import register_kb_reader

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
MESH_ID = re.compile(r"^[CD]\d{6,9}$")


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


@register_kb_reader("mesh", files=mesh_files)
def read_mesh(path: PathLike, bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    """MeSH TSV exports: a folder holding both files, or either file alone.

    Descriptors: ``id name synonyms tree-numbers taxon-ids``. Supplementary records:
    ``id name synonyms mapped-descriptor-ids``; their types are the branches of the descriptors they
    map to. Upstream has one supplementary line with a tab inside its synonyms: extra middle columns
    are read as further synonyms rather than refused.
    """
    out = Collector(bad_lines)
    descriptor_types: Dict[str, List[str]] = {}
    pending: List[Entity] = []
    for file in mesh_files(path):
        for lineno, line in nonblank_lines(file, bad_lines):
            cols = line.split("\t")
            if len(cols) < 4 or not MESH_ID.match(cols[0].strip()) or not cols[1].strip():
                out.fail(file, lineno, "expected a MeSH id (D…/C…), a name and at least 4 tab-separated columns")
                continue
            mesh_id, name = cols[0].strip(), cols[1].strip()
            if mesh_id.startswith("D"):
                if len(cols) > 5:
                    out.fail(file, lineno, f"a descriptor line has at most 5 tab-separated columns, not {len(cols)}")
                    continue
                trees = split(cols[3])
                types = unique(MESH_BRANCHES.get(t[0], t[0]) for t in trees)
                extra: Dict[str, object] = {"tree_numbers": trees}
                if len(cols) > 4 and cols[4].strip():
                    extra["taxon_ids"] = split(cols[4])
                entity = Entity(mesh_id, name, unique(split(cols[2]), name), types, extra=extra)
            else:
                synonyms = [s for col in cols[2:-1] for s in split(col.strip('"'))]
                mapped = [m.strip().lstrip("*") for m in cols[-1].split(",") if m.strip()]
                entity = Entity(mesh_id, name, unique(synonyms, name), [], extra={"mapped_to": mapped})
            before = len(out.entities)
            out.add(entity, file, lineno)
            if len(out.entities) > before and mesh_id.startswith("D"):
                descriptor_types[mesh_id] = entity.types
            elif len(out.entities) > before:
                pending.append(entity)
    for entity in pending:
        entity.types = unique(t for d in entity.extra["mapped_to"] for t in descriptor_types.get(d, []))
    return out.result()
