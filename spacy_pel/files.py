"""Files: atomic writes of files and folders, and JSON-lines records.

The bottom floor of the package: it imports nothing from spacy_pel. Every writer in the package goes
through :func:`atomic_write` or :func:`atomic_dir`, so an interrupted job never leaves a half-written
file where a finished one is expected.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Union

PathLike = Union[str, Path]


def atomic_write(target: PathLike, write) -> None:
    """Call ``write(tmp_path)`` and move the result onto ``target`` only if it succeeded."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=target.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_dir(target: PathLike):
    """Context manager yielding a temporary folder that replaces ``target`` only on success."""
    return _AtomicDir(Path(target))


class _AtomicDir:
    def __init__(self, target: Path):
        self.target = target

    def __enter__(self) -> Path:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.tmp-", dir=self.target.parent))
        self.tmp.chmod(0o755)
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        old = None
        if self.target.exists():
            old = self.target.with_name(f".{self.target.name}.old-{os.getpid()}")
            os.replace(self.target, old)
        os.replace(self.tmp, self.target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return False


def write_jsonl(records: Iterable[dict], path: PathLike) -> None:
    """One JSON object a line (UTF-8, non-ASCII kept), written atomically."""

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")

    atomic_write(path, write)
