"""``to_bytes`` / ``from_bytes`` for a component that saves itself as a folder: the folder's files in
one msgpack dict, written and read back through a temporary folder."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

import srsly


def folder_to_bytes(to_disk: Callable[[Path], None]) -> bytes:
    """The files ``to_disk(folder)`` writes, as bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        to_disk(Path(tmp))
        root = Path(tmp)
        files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    return srsly.msgpack_dumps(files)


def folder_from_bytes(data: bytes, from_disk: Callable[[Path], None]) -> None:
    """Write the files of ``data`` into a temporary folder and call ``from_disk(folder)``."""
    files = srsly.msgpack_loads(data)
    with tempfile.TemporaryDirectory() as tmp:
        for name, content in files.items():
            target = Path(tmp) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        from_disk(Path(tmp))
