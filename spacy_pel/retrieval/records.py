"""An entity table's records file (``entities.jsonl``) mapped read-only: records are read by slicing it.
Pickled (``nlp.pipe(n_process=…)`` with spawned processes) by its path, which the process that unpickles it
maps again, or by its bytes once the file has gone or changed (a pipeline read from bytes removes the
folder it was unpacked to; the mapping keeps the records readable in this process)."""
from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Tuple, Union


def _stat(path: str) -> Tuple[int, ...]:
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return st.st_size, st.st_mtime_ns


class MappedRecords:
    """The bytes of a records file, mapped; ``records[a:b]`` is a record's line."""

    def __init__(self, path: Union[str, Path]):
        self.path = os.path.abspath(path)
        with open(self.path, "rb") as f:
            self.data: Union[mmap.mmap, bytes] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.stat = _stat(self.path)

    def __getitem__(self, key):
        return self.data[key]

    def __len__(self) -> int:
        return len(self.data)

    def __getstate__(self) -> dict:
        if self.stat and _stat(self.path) == self.stat:
            return {"path": self.path}
        return {"bytes": bytes(self.data)}

    def __setstate__(self, state: dict) -> None:
        if "path" in state:
            self.__init__(state["path"])
        else:
            self.path, self.data, self.stat = "", state["bytes"], ()
