"""Files: atomic writes of files and folders, strict JSON and JSON-lines records, and reading input files line by line.

The bottom floor of the package: it imports nothing from spacy_pel. Every writer in the package goes
through :func:`atomic_write` or :func:`atomic_dir`, so an interrupted job never leaves a half-written
file where a finished one is expected. Every reader of user files goes through :func:`read_lines`,
so a malformed line is always reported as ``FILE:LINE: reason`` (:class:`LineError`).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, Tuple, Union

PathLike = Union[str, Path]


def _file_mode() -> int:
    """What ``open(…, "w")`` would give a new file under this process's umask (mkstemp gives 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def is_stream(target: Path) -> bool:
    """Is ``target`` (a symlink followed) a character device, FIFO or socket (``/dev/stdout``, a named pipe)?"""
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def written_through(target: PathLike) -> Path:
    """Where a write to ``target`` lands: for a symlink (a KB folder kept on a big disk and linked into the
    project), the file or folder it points to, so that the link stays and its target gets the new contents."""
    target = Path(target)
    return Path(os.path.realpath(target)) if target.is_symlink() else target


def _scratch_prefix(target: Path, kind: str) -> str:
    """The name of a scratch file or folder beside ``target`` (``.NAME.tmp-HOST-PID-``, ``.NAME.old-HOST-PID``):
    dot-hidden, and naming the process that made it, so that one left by a killed job can be told from one
    another job is still writing (:func:`_sweep_scratch`)."""
    return f".{target.name}.{kind}-{socket.gethostname()}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


_SWEPT: set = set()  # the folders this process has swept (once each: a folder of many outputs is listed once)


def _sweep_scratch(target: Path) -> None:
    """Remove the scratch files and folders in ``target``'s folder that killed jobs left (made on this host by a
    process that is gone), the first time this process writes there: a job killed mid-write leaves a hidden
    copy of its whole output each time, which nothing else ever removes. An old output set aside by a job
    killed before its new one took its place is put back instead. Another host's scratch (a shared file
    system), a live process's and another user's are kept, and one that cannot be removed is left: the write
    goes on. On Windows, where a process cannot be probed without a handle, nothing is removed."""
    folder = target.parent
    if os.name == "nt" or str(folder.resolve()) in _SWEPT or not folder.is_dir():
        return
    _SWEPT.add(str(folder.resolve()))
    host = socket.gethostname()
    with os.scandir(folder) as entries:
        names = [e.name for e in entries if e.name.startswith(".")]
    for name in names:
        for kind in ("tmp", "old"):
            mark = f".{kind}-{host}-"
            at = name.rfind(mark)
            pid = name[at + len(mark):].split("-", 1)[0] if at > 0 else ""
            if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
                continue
            path, own = folder / name, folder / name[1:at]
            try:
                if path.lstat().st_uid != os.getuid():  # another user's (a shared sticky folder such as /tmp): theirs
                    continue
                if kind == "old" and not os.path.lexists(own):  # killed between its two renames: the old output back
                    os.replace(path, own)
                elif path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            except OSError:  # gone meanwhile, or not ours to remove: the write goes on
                continue


def atomic_write(target: PathLike, write) -> None:
    """Call ``write(tmp_path)`` and move the result onto ``target`` (a symlink: the file it points to) only if it
    succeeded, fsync'ed before the rename and its folder after; a stream (``/dev/stdout``, a pipe) is written to directly."""
    if is_stream(Path(target)):
        return write(Path(target))
    target = written_through(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep_scratch(target)
    fd, tmp = tempfile.mkstemp(prefix=_scratch_prefix(target, "tmp") + "-", dir=target.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        _fsync(tmp)
        os.chmod(tmp, _file_mode())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync(target.parent)


def _fsync(path: PathLike) -> None:
    """Flush a file's data, or a folder's entries, to the disk (what makes a rename durable); a write error raises."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:  # where it cannot be: a folder on Windows, an unreadable file, a mount that does not sync
        if err.errno not in (errno.EACCES, errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise


class atomic_dir:
    """Context manager yielding a temporary folder that replaces ``target`` (a symlink: the folder it points to) only
    on success, its files and folders fsync'ed before the rename, the parent after. ``on_old``: called with the folder
    ``target`` was (renamed aside) once the new one took its place, to move out what must outlive it (if it raises, it is kept)."""

    def __init__(self, target: PathLike, on_old: Optional[Callable[[Path], None]] = None):
        self.target, self.on_old = written_through(Path(target)), on_old

    def __enter__(self) -> Path:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        _sweep_scratch(self.target)
        self.tmp = Path(tempfile.mkdtemp(prefix=_scratch_prefix(self.target, "tmp") + "-", dir=self.target.parent))
        self.tmp.chmod(0o755)
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        for root, _, names in os.walk(self.tmp, topdown=False):  # symlinks not followed: not this write's
            for path in [*(p for p in (Path(root, n) for n in names) if stat.S_ISREG(p.lstat().st_mode)), root]:
                _fsync(path)
        old = self.target.with_name(_scratch_prefix(self.target, "old")) if self.target.exists() else None
        if old is not None:
            os.replace(self.target, old)
        os.replace(self.tmp, self.target)
        _fsync(self.target.parent)
        if old is not None:
            if self.on_old is not None and old.is_dir():
                self.on_old(old)
            shutil.rmtree(old, ignore_errors=True)


def link_or_copy(src: PathLike, dst: PathLike) -> None:
    """A hard link of ``src`` at ``dst`` where the file system allows, else a copy (``shutil.copytree``'s
    ``copy_function``: a folder copied into a sibling costs no space)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def strict_json(data):
    """``data`` with NaN and infinite floats as ``None`` (strict JSON, RFC 8259: what ``jq``, ``JSON.parse``
    and ``json.loads`` with strict constants read); tuples become lists."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: strict_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict_json(v) for v in data]
    return data


def json_text(data, **kwargs) -> str:
    """``json.dumps`` of :func:`strict_json` ``(data)``: the text of every JSON report the package writes
    (a training log, a checkpoint's state, a calibration record), never a bare ``NaN`` or ``Infinity``."""
    return json.dumps(strict_json(data), allow_nan=False, **kwargs)


def write_jsonl(records: Iterable[dict], path: PathLike) -> None:
    """One JSON object a line (UTF-8, non-ASCII kept), written atomically."""

    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")

    atomic_write(path, write)


# ---------------------------------------------------------------------------- reading input files


class InputError(ValueError):
    """Bad input from the user — a malformed file, a missing path, an impossible option.

    The command-line tools print its message on one line (no traceback) and exit with status 2.
    :class:`spacy_pel.kb.KBFormatError` and :class:`spacy_pel.corpora.CorpusFormatError` are kinds of it.
    """


def check_output_folder(path: PathLike, what: str, holds: Callable[[Path], bool]) -> None:
    """Refuse to write a ``what`` folder (a KB, a name index, a pipeline) at ``path`` when that would replace
    something else: a file, or a folder that is neither empty nor a ``what`` (``holds(path)`` is False).
    One line (:class:`InputError`), to be checked before any work."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"output {path} is a file; give a folder to write the {what} to")
    if path.is_dir() and any(path.iterdir()) and not holds(path):
        article = "an" if what[:1].lower() in "aeiou" else "a"
        raise InputError(f"output {path} is a folder that is not {article} {what}; refusing to replace it")


class LineError(InputError):
    """A malformed line of an input file: the message starts with ``FILE:LINE:``."""

    def __init__(self, path: PathLike, line: int, message: str):
        self.path, self.line, self.reason = str(path), line, message
        super().__init__(f"{path}:{line}: {message}")


class BadLines:
    """Malformed lines skipped at the user's request (``--skip-bad-lines``): a count and examples.

    Readers take ``bad_lines=None`` (the default: the first malformed line raises) or a ``BadLines``
    to record each malformed line in and go on. Nothing is skipped without being counted here.
    """

    def __init__(self, keep: int = 10):
        self.count = 0
        self.keep = keep
        self.examples: List[str] = []

    def add(self, error: InputError) -> None:
        self.count += 1
        if len(self.examples) < self.keep:
            self.examples.append(str(error))

    def as_dict(self) -> dict:
        return {"skipped_lines": self.count, "skipped_examples": list(self.examples)}

    def summary(self) -> str:
        if not self.count:
            return "no malformed lines"
        more = f" (first {len(self.examples)} shown)" if self.count > len(self.examples) else ""
        return f"skipped {self.count} malformed line(s){more}:\n  " + "\n  ".join(self.examples)


def reject(error: LineError, bad_lines: Optional[BadLines]) -> None:
    """Raise ``error``, or record it in ``bad_lines`` when the caller asked to skip bad lines."""
    if bad_lines is None:
        raise error
    bad_lines.add(error)


def read_lines(
    path: PathLike, error: Callable[[PathLike, int, str], LineError], bad_lines: Optional[BadLines] = None
) -> Iterator[Tuple[int, str]]:
    """``(line number, text)`` of each line of a UTF-8 text file, ``\\r\\n`` or ``\\n`` ended.

    Lines end at ``\\n`` only (so line numbers are those of ``grep -n`` and a lone ``\\r`` stays part of
    its line); the ``\\r`` of a ``\\r\\n`` ending and a byte-order mark are removed. A line that is not
    valid UTF-8 is refused as ``error(path, line, reason)`` (or skipped into ``bad_lines``).
    """
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            try:
                text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                column = len(raw[: err.start].decode("utf8", "replace")) + 1
                reject(error(path, lineno, f"not UTF-8 text (byte 0x{raw[err.start]:02x} at column {column})"), bad_lines)
                continue
            yield lineno, text


def read_text(path: PathLike, error: Callable[[PathLike, int, str], LineError] = LineError) -> str:
    """The whole of a UTF-8 text file, a byte-order mark removed; one that is not UTF-8 is refused as
    ``error(path, line, reason)`` at its first such line, as :func:`read_lines` words it (byte and column)."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        for _ in read_lines(path, error):  # raises at the first line that is not UTF-8
            pass
        raise


def file_digest(*paths: PathLike) -> str:
    """SHA-256 of the files' contents (and their order), to tell whether an input changed."""
    h = hashlib.sha256()
    for path in paths:
        _hash_file(h, Path(path).name, path)
    return h.hexdigest()


def folder_digest(folder: PathLike, skip: Iterable[PathLike] = ()) -> str:
    """SHA-256 of every file below ``folder`` (their paths relative to it, and contents): the same for a
    copy of the folder, different after any file in it changed (a saved pipeline: ~1 s a GB). Files
    below a folder of ``skip`` are left out (a run's own output kept inside its input)."""
    root = Path(folder)
    skipped = [Path(s) for s in skip]
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if not any(path.is_relative_to(s) for s in skipped):
            _hash_file(h, path.relative_to(root).as_posix(), path)
    return h.hexdigest()


def _hash_file(h, name: str, path: PathLike) -> None:
    """Add a file's ``name`` and contents to the hash ``h``."""
    h.update(f"{name}\0".encode())
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    h.update(b"\0")


# ---------------------------------------------------------------------------- one writer per output


class OutputBusyError(OSError):
    """Another process is writing the same output (it holds the output's lock file)."""


class output_lock:
    """Hold ``TARGET.lock`` (an exclusive ``flock``, the holder's pid inside) while ``target`` is
    written, so that a second process writing the same output fails at once with
    :class:`OutputBusyError` (``TARGET is being built by another process (pid N)``) instead of racing.

    An output that is a symlink is locked beside the folder it points to, where it is written, so a run
    by the link's name and one by the real name exclude each other. The lock file is removed on exit; so are the folders made to hold it if they are still empty (an
    error before anything was written leaves no empty folder behind). The kernel drops the lock of a
    killed process, so a stale lock file never blocks a later run.
    """

    def __init__(self, target: PathLike):
        self.target = Path(target)
        real = written_through(self.target)  # a symlinked output: locked where it is written, as by its real name
        self.path = real.with_name(real.name + ".lock")

    def __enter__(self) -> "output_lock":
        self.made = [p for p in reversed(self.path.parents) if not p.exists()]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
                os.close(fd)
                self._remove_made()
                if err.errno in (errno.EAGAIN, errno.EACCES):
                    raise OutputBusyError(f"{self.target} is being built by another process (pid {holder})") from None
                raise
            try:  # the file may have been removed by the holder that just released it: lock the file at the path
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc) -> bool:
        self.path.unlink(missing_ok=True)  # before unlocking: a waiter then finds no file, or a new one
        os.close(self.fd)
        self._remove_made()
        return False

    def _remove_made(self) -> None:
        for folder in reversed(self.made):
            try:
                folder.rmdir()
            except OSError:  # not empty (or gone): it holds something now
                break
