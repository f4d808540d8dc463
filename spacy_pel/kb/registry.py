"""The KB formats: a registry of readers, and :func:`read_kb` / :func:`kb_files` that use it.

A reader is a function ``read(path, bad_lines=None) -> List[Entity]`` that reports a malformed line
through :class:`~.entity.Collector` (``FILE:LINE: reason``, or counted in ``bad_lines``). Register one
under a format name, from any package, and ``read_kb(path, "name")`` and ``build-kb --format name``
read it — no change to spacy_pel::

    from spacy_pel.kb import Entity, register_kb_reader

    @register_kb_reader("inhouse")
    def read_inhouse(path, bad_lines=None):
        ...

or, without an import of your module, with an entry point in your package's setup.py::

    entry_points={"spacy_pel_kb_readers": ["inhouse = my_package.kb:read_inhouse"]}

A format whose path stands for several files (a MeSH folder) names them with
``register_kb_reader(name, files=lister)`` (a reader's ``kb_files`` attribute).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, List, Mapping, Optional

import catalogue

from .. import files
from .entity import Entity, KBFormatError, PathLike, id_problem

Reader = Callable[..., List[Entity]]
FileLister = Callable[[Path], List[Path]]

ENTRY_POINT_GROUP = "spacy_pel_kb_readers"
kb_readers = catalogue.create("spacy_pel", "kb_readers", entry_points=True)  # group spacy_pel_kb_readers


def register_kb_reader(name: str, files: Optional[FileLister] = None) -> Callable[[Reader], Reader]:
    """Decorator: register ``reader`` as the KB format ``name`` (a later registration replaces it)."""

    def register(reader: Reader) -> Reader:
        if files is not None:
            reader.kb_files = files  # type: ignore[attr-defined]
        kb_readers.register(name, func=reader)
        return reader

    return register


class _Readers(Mapping):
    """Format name → reader: a live view of the registry (entry points included)."""

    def __getitem__(self, name: str) -> Reader:
        if name not in kb_readers:
            raise KeyError(name)
        return kb_readers.get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in kb_readers

    def __iter__(self) -> Iterator[str]:
        return iter(kb_readers.get_all())

    def __len__(self) -> int:
        return len(kb_readers.get_all())


READERS: Mapping[str, Reader] = _Readers()


def kb_files(path: PathLike, format: str) -> List[Path]:
    """The files a KB path stands for (a MeSH folder is two files); refuses a missing path."""
    if format not in READERS:
        raise files.InputError(f"unknown KB format {format!r}; choose one of {', '.join(sorted(READERS))}")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"KB file not found: {path}")
    lister = getattr(READERS[format], "kb_files", None)
    found = list(lister(path)) if lister is not None else [path]
    for file in found:
        if file.is_dir():
            raise files.InputError(f"{file} is a folder, not a {format} KB file")
        if file.exists() and not file.is_file():  # a KB is read twice (hashed, then read): a pipe once only
            raise files.InputError(f"{file} is a pipe or device, not a {format} KB file: save it to a file first")
    return found


def read_kb(path: PathLike, format: str = "jsonl", bad_lines: Optional[files.BadLines] = None) -> List[Entity]:
    """Read a KB file (or MeSH folder) in one of :data:`READERS`' formats.

    A malformed line raises :class:`KBFormatError` (``FILE:LINE: reason``), unless ``bad_lines`` is
    given: then each malformed line is recorded there and left out. A KB without any entity is
    refused either way, and so is an id holding ``|``, ``,`` or ``+`` or spelling NIL that a reader of another
    package let through (the built-in readers refuse it at its line, with :class:`~.entity.Collector`).
    """
    kb_files(path, format)
    entities = READERS[format](path, bad_lines=bad_lines)
    for e in entities:
        problem = id_problem(e.id)
        if problem is not None:
            raise files.InputError(f"{path}: entity id {e.id!r} (read as {format}) {problem}")
    if not entities:
        skipped = f" ({bad_lines.count} malformed line(s) skipped)" if bad_lines is not None and bad_lines.count else ""
        raise KBFormatError(path, 1, f"no entities in this {format} KB{skipped}")
    return entities
