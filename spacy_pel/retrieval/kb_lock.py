"""The lock that every writer of a KB folder holds: ``KB.lock``, beside the folder.

``build-kb`` holds it as its output's lock for a build, ``--add`` and ``--force``, each of which replaces the
whole folder. ``build-names`` holds it for its whole run, from reading the KB to writing its name index. The
index is built from the KB, and by default it is written inside the KB folder (``KB/names``), so a rebuild
while it runs would either take the fresh index away with the old folder or leave an index of the old KB in
the new one. With the lock, the second of the two commands is refused at once, in one line
(``KB is being built by another process (pid N)``).
"""
from __future__ import annotations

import contextlib
import errno
from pathlib import Path
from typing import Iterator

from ..files import OutputBusyError, output_lock, written_through

READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)  # no lock file can be made beside the KB


@contextlib.contextmanager
def kb_lock(kb: Path, output: Path) -> Iterator[None]:
    """Hold ``KB.lock`` while ``output`` is built from the KB folder ``kb``. A KB beside which this user can
    write nothing (a read-only share) is read without the lock when ``output`` is outside it: this user
    cannot rebuild that KB either. An output inside such a KB fails as writing there would."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(output_lock(kb))
        except OSError as err:
            inside = written_through(output).resolve().is_relative_to(written_through(kb).resolve())
            if isinstance(err, OutputBusyError) or err.errno not in READ_ONLY or inside:
                raise
        yield
