"""Knowledge-base records and readers for the KB file formats spacy_pel accepts.

The canonical format is JSONL, one entity per line::

    {"id": "D008094", "name": "Lithium", "aliases": ["Li"], "types": ["Chemicals and Drugs"],
     "description": "", "extra": {"tree_numbers": ["D01.268.556.579"]}}

Only ``id`` and ``name`` are required. Readers also exist for the MeSH TSV exports (descriptors and
supplementary concept records), the CTD MEDIC vocabulary, OBO ontologies, UMLS release files
(``MRCONSO.RRF``) and CSV / TSV tables, one module each; a
format of your own is registered with :func:`register_kb_reader` or the ``spacy_pel_kb_readers``
entry-point group (see :mod:`.registry`). Every reader raises :class:`KBFormatError` naming the file
and line (``FILE:LINE: reason``) for a malformed line, a byte that is not UTF-8 or a duplicate id —
or, given ``bad_lines``, counts the line there and skips it.
"""
# the built-in formats register in import order: not sorted
# isort: off
from .entity import Entity, KBFormatError, PathLike, normalize, require_trainable
from .registry import ENTRY_POINT_GROUP, READERS, kb_files, kb_readers, read_kb, register_kb_reader

# the built-in formats, registered in this order
from .jsonl import read_jsonl, write_jsonl
from .mesh import MESH_BRANCHES, MESH_DESCRIPTOR_FILE, MESH_SUPPLEMENTARY_FILE, mesh_files, read_mesh
from .medic import read_medic
from .obo import OBO_STANZAS, read_obo
from .umls import UMLS_CONCEPTS, read_umls, umls_files
from .delimited import read_csv, read_tsv

# isort: on

__all__ = [
    "ENTRY_POINT_GROUP", "Entity", "KBFormatError", "MESH_BRANCHES", "MESH_DESCRIPTOR_FILE",
    "MESH_SUPPLEMENTARY_FILE", "OBO_STANZAS", "PathLike", "READERS", "kb_files", "kb_readers",
    "UMLS_CONCEPTS", "mesh_files", "normalize", "read_jsonl", "read_kb", "read_medic", "read_mesh", "read_obo",
    "read_csv", "read_tsv", "read_umls", "register_kb_reader", "require_trainable", "umls_files", "write_jsonl",
]
