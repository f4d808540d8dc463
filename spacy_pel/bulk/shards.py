"""Input shards of a bulk run: find them, cut each into chunks, read one chunk's documents.

A shard is one input file: JSON lines (``.jsonl``, ``.ndjson``) or Parquet of ``{id, text}`` (raw text:
the pipeline finds the mentions), or PubTator (``.txt``, ``.pubtator``: the mentions are given; a file
without any annotation line is raw text, as ``link`` reads it). BioC JSON / XML files are not shards
(``link`` reads them): a ``.json`` file is never taken for JSON lines. Shard names flatten sub-folders
with ``__``; two files whose names would be the same (ignoring case) are refused. The driver scans
each unfinished shard once for document boundaries (a byte offset every ``chunk_docs`` documents;
Parquet: row numbers from the footer), so a chunk — the unit of work an actor links in one call — is
read by exactly one task, and the shard's document count is known before linking starts (a shard is
finished when every one of its documents has come back, linked or as an error).

Reading never raises on a bad document: a malformed line, a record without ``id`` or ``text`` (or whose
``id`` or ``text`` holds a lone surrogate, which is no Unicode text), or a PubTator document with a
malformed line becomes an item with ``error`` set (its id and the reason), which the run writes to the
errors file. In a PubTator shard, the lines before its first title (raw text, one abstract a line; an
abstract or annotation line without its title) are one such item too, named ``FILE:LINE``: a shard of
non-blank lines and no title is one error, not an empty shard. Nothing here imports Ray.
"""
from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from .. import files
from ..corpora import CorpusFormatError, read_pubtator, surrogate_problem

log = logging.getLogger(__name__)
FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".pubtator": "pubtator", ".txt": "pubtator"}
KINDS = ".jsonl / .ndjson or .parquet files of {id, text}, or PubTator .txt / .pubtator files"
_TITLE = re.compile(rb"^([^\t|\r\n]*)\|t\|")  # a PubTator document starts at its title line
_MENTION = re.compile(rb"^[^\t|\r\n]*\t[0-9]+\t")  # a PubTator annotation line: PMID, start offset, …
_TMP_LINE = re.compile(r"^(.*?):(\d+): (.*)$", re.S)
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, read as in every other reader: as if it were not there
NO_TITLE = -1  # an item's title_length when its text has no title (an int always: one Arrow type in every chunk)


@dataclass(frozen=True)
class Shard:
    path: str
    name: str  # the shard's name in the output folder: its path below INPUT, "/" → "__"
    format: str  # jsonl | parquet | pubtator

    def stamp(self) -> dict:
        """What the completion marker records of the input (a changed file is linked again)."""
        stat = os.stat(self.path)
        return {"path": self.path, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


@dataclass(frozen=True)
class Chunk:
    shard: str  # Shard.name
    path: str
    format: str
    start: int  # byte offset (jsonl, pubtator) or row (parquet) of the chunk's first document
    end: int  # exclusive
    first_seq: int  # the first document's number in its shard
    count: int  # documents in the chunk
    first_line: int = 1  # line number of ``start`` (text formats), for FILE:LINE errors
    raw: bool = False  # a PubTator shard without any annotation line: raw text, the pipeline finds the mentions

    def as_item(self) -> dict:
        return asdict(self)


def find_shards(input: files.PathLike, leave_out: Sequence[files.PathLike] = ()) -> List[Shard]:
    """The shards of INPUT: the file itself, or every JSONL / Parquet / PubTator file below a folder
    (sorted, hidden files left out; the other files left out with a warning). The paths ``leave_out`` and
    the files below them (bulk's OUTPUT and its lock, when a user puts OUTPUT inside INPUT: its
    mentions/*.parquet are no input) are left out too.
    A ``.txt`` file is PubTator;
    ``.json`` (BioC JSON for ``link``) is no shard. Two files whose shard names would be the same (the
    output files of one would be the other's) are refused."""
    root = Path(input).resolve()  # absolute: the actors may run elsewhere, in another working folder
    if not root.exists():
        raise FileNotFoundError(f"input not found: {root}")
    if root.is_file():
        fmt = FORMATS.get(root.suffix.lower())
        if fmt is None:
            raise files.InputError(f"{root}: not a shard (give {KINDS}; BioC .json / .xml files: link them with `link`)")
        return [Shard(str(root), root.name, fmt)]
    skip = [Path(path).resolve() for path in leave_out]
    found = [p for p in sorted(root.rglob("*"))
             if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
             and not any(p.is_relative_to(path) for path in skip)]
    shards = [Shard(str(p), p.relative_to(root).as_posix().replace("/", "__"), FORMATS[p.suffix.lower()])
              for p in found if p.suffix.lower() in FORMATS]
    left_out = [p.relative_to(root).as_posix() for p in found if p.suffix.lower() not in FORMATS]
    if not shards:
        raise files.InputError(f"{root}: no shard in this folder (give {KINDS})")
    if left_out:
        log.warning(f"{root}: {len(left_out)} file(s) left out, not shards ({', '.join(left_out[:3])}"
                    f"{', …' if len(left_out) > 3 else ''}): bulk reads {KINDS}")
    _check_names(shards)
    return shards


def _check_names(shards: List[Shard]) -> None:
    """Refuse two shards whose output files would be the same: ``x/y.jsonl`` and ``x__y.jsonl`` (sub-folders
    are flattened with ``__``), or names that differ only in case (the output may be on a disk that ignores it)."""
    seen: Dict[str, Shard] = {}
    for shard in shards:
        first = seen.setdefault(shard.name.casefold(), shard)
        if first is not shard:
            raise files.InputError(f"{first.path} and {shard.path} would write the same output files (shard name "
                                   f"{shard.name!r}: sub-folders become '__', case aside); rename one of them")


def plan_chunks(shard: Shard, chunk_docs: int) -> List[Chunk]:
    """Cut a shard into chunks of ``chunk_docs`` documents (one scan of the file; Parquet: the footer)."""
    if shard.format == "parquet":
        import pyarrow.parquet as pq

        rows = pq.ParquetFile(shard.path).metadata.num_rows
        return _cut(Chunk(shard.name, shard.path, shard.format, 0, rows, 0, rows), list(range(rows)), chunk_docs)
    whole = Chunk(shard.name, shard.path, shard.format, 0, os.path.getsize(shard.path), 0, 0)
    starts, mentions = _doc_starts(whole)
    return _cut(replace(whole, raw=shard.format == "pubtator" and not mentions), starts, chunk_docs)


def raw_text(shard: Shard, chunks: List[Chunk]) -> bool:
    """Is ``shard`` (planned as ``chunks``) raw text, whose mentions the pipeline finds: JSON lines and Parquet,
    and PubTator without any annotation line (abstracts as PubMed exports them)?"""
    return shard.format != "pubtator" or any(c.raw for c in chunks)


def split_chunk(chunk: Chunk) -> List[Chunk]:
    """One chunk per document of ``chunk`` (to link again alone the documents of a batch that failed)."""
    if chunk.format == "parquet":
        return _cut(chunk, list(range(chunk.start, chunk.end)), 1)
    return _cut(chunk, _doc_starts(chunk)[0], 1)


def _doc_starts(chunk: Chunk) -> Tuple[List[Tuple[int, int]], bool]:
    """(byte offset, line number) of the first line of every document in the chunk's byte range, and
    whether the range has a PubTator annotation line. In PubTator, non-blank lines before the range's first
    title (raw text, an abstract or annotation line without its title) are a document of their own, which
    :func:`_read_pubtator` makes an error: nothing of a shard is left unread."""
    starts, mentions = [], False
    offset, lineno = chunk.start, chunk.first_line
    leading = chunk.format == "pubtator"  # no title seen yet
    with open(chunk.path, "rb") as f:
        f.seek(chunk.start)
        for line in f:
            if offset >= chunk.end:
                break
            if chunk.format == "jsonl" and line.strip() or chunk.format == "pubtator" and _TITLE.match(line):
                starts.append((offset, lineno))
                leading = False
            elif leading and (line[len(BOM):] if offset == 0 and line.startswith(BOM) else line).strip():
                starts.append((chunk.start, chunk.first_line))  # the lines before the first title
                leading = False
            mentions = mentions or chunk.format == "pubtator" and bool(_MENTION.match(line))
            offset += len(line)
            lineno += 1
    return starts, mentions


def _cut(whole: Chunk, starts: list, size: int) -> List[Chunk]:
    """Chunks of ``size`` documents of ``whole``, given each document's start (a row, or (offset, line))."""
    out = []
    for i in range(0, len(starts), size):
        first, nxt = starts[i], starts[i + size] if i + size < len(starts) else None
        begin, line = first if isinstance(first, tuple) else (first, 1)
        end = whole.end if nxt is None else (nxt[0] if isinstance(nxt, tuple) else nxt)
        out.append(replace(whole, start=begin, end=end, first_seq=whole.first_seq + i, count=min(size, len(starts) - i),
                           first_line=line))
    return out


def _item(chunk: Chunk, seq: int, doc_id: str, text: str = "", spans: Optional[list] = None, error: str = "",
          title_length: Optional[int] = None) -> dict:
    """One document of a chunk as the dataset carries it (``spans``: JSON ``[[start, end, label], …]``
    or "" for raw text, where the pipeline finds the mentions; ``title_length``: PubTator's, the text being
    ``title + " " + abstract``, else :data:`NO_TITLE`)."""
    return {"shard": chunk.shard, "seq": seq, "doc_id": doc_id, "text": text,
            "spans": "" if spans is None else json.dumps(spans), "error": error,
            "title_length": NO_TITLE if title_length is None else title_length}


def read_chunk(item: Dict) -> Iterator[dict]:
    """The documents of one chunk (an item of :meth:`Chunk.as_item`): exactly ``count`` items, in order."""
    chunk = Chunk(**{k: item[k] for k in Chunk.__dataclass_fields__})
    reader = {"jsonl": _read_jsonl, "parquet": _read_parquet, "pubtator": _read_pubtator}[chunk.format]
    n = 0
    for n, out in enumerate(reader(chunk), start=1):
        yield out
    if n != chunk.count:  # the file changed since it was planned: say so for each missing document
        for seq in range(chunk.first_seq + n, chunk.first_seq + chunk.count):
            yield _item(chunk, seq, f"{chunk.path}#{seq}", error="the input file changed while the run read it")


def _record(chunk: Chunk, seq: int, where: str, record) -> dict:
    if not isinstance(record, dict):
        return _item(chunk, seq, where, error=f"{where}: expected a JSON object with id and text")
    doc_id, text = record.get("id"), record.get("text")
    if doc_id is None or doc_id == "":
        return _item(chunk, seq, where, error=f"{where}: no id")
    if not isinstance(text, str):
        return _item(chunk, seq, str(doc_id), error=f"{where}: text must be a string, not {type(text).__name__}")
    for field, value in (("id", str(doc_id)), ("text", text)):
        problem = surrogate_problem(value, field)  # "\ud800" in JSON: no tokenizer nor output file takes it
        if problem is not None:
            return _item(chunk, seq, where if field == "id" else str(doc_id), error=f"{where}: {problem}")
    return _item(chunk, seq, str(doc_id), text)


def _read_jsonl(chunk: Chunk) -> Iterator[dict]:
    with open(chunk.path, "rb") as f:
        f.seek(chunk.start)
        data = f.read(chunk.end - chunk.start)
    seq = chunk.first_seq
    for lineno, raw in enumerate(data.split(b"\n"), start=chunk.first_line):
        if not raw.strip():
            continue
        where = f"{chunk.path}:{lineno}"
        try:
            record = json.loads(raw.decode("utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            yield _item(chunk, seq, where, error=f"{where}: not a JSON line ({err})")
        else:
            yield _record(chunk, seq, where, record)
        seq += 1


def _read_parquet(chunk: Chunk) -> Iterator[dict]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(chunk.path)
    groups, first, row = [], None, 0
    for g in range(pf.metadata.num_row_groups):  # the row groups the chunk's rows lie in
        n = pf.metadata.row_group(g).num_rows
        if row < chunk.end and row + n > chunk.start:
            groups.append(g)
            first = row if first is None else first
        row += n
    columns = [c for c in ("id", "text") if c in pf.schema_arrow.names]
    table = pf.read_row_groups(groups, columns=columns).slice(chunk.start - first, chunk.count)
    for i, record in enumerate(table.to_pylist()):
        yield _record(chunk, chunk.first_seq + i, f"{chunk.path}#row{chunk.start + i}", record)


def _read_pubtator(chunk: Chunk) -> Iterator[dict]:
    """Documents of a PubTator chunk, mentions given (none: raw text, if the shard has no annotation line);
    a document with a malformed line is an error."""
    with open(chunk.path, "rb") as f:
        f.seek(chunk.start)
        data = f.read(chunk.end - chunk.start)
    if chunk.start == 0 and data.startswith(BOM):  # the shard's byte order mark, no part of its first PMID
        data = data[len(BOM):]
    titles: List[Tuple[str, int]] = []  # (pmid, line in the chunk) of each document
    content = 0  # the chunk's first non-blank line (before the first title: a document of its own, an error)
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        m = _TITLE.match(line)
        if m:
            titles.append((m.group(1).decode("utf8", "replace"), lineno))
        content = content or (lineno if line.strip() else 0)
    fd, tmp = tempfile.mkstemp(suffix=".pubtator")
    bad = files.BadLines(keep=10**9)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            parsed = {d.pmid: d for d in read_pubtator(tmp, bad)}
        except CorpusFormatError:  # nothing readable at all: every document is an error
            parsed = {}
    finally:
        os.unlink(tmp)
    problems: Dict[int, str] = {}  # first bad line (chunk numbering) → reason, FILE:LINE in the real file
    for example in bad.examples:
        m = _TMP_LINE.match(example)
        line = int(m.group(2)) if m else 1
        problems.setdefault(line, f"{chunk.path}:{line + chunk.first_line - 1}: {m.group(3) if m else example}")
    bounds = [t[1] for t in titles] + [10**18]
    first_seq = chunk.first_seq
    if content and content < bounds[0]:  # lines before the first title, which read_pubtator refused
        where = f"{chunk.path}:{content + chunk.first_line - 1}"
        bad_here = [reason for at, reason in sorted(problems.items()) if at < bounds[0]]
        yield _item(chunk, first_seq, where, error=bad_here[0] if bad_here else f"{where}: expected a PMID|t| title line")
        first_seq += 1
    for i, (pmid, line) in enumerate(titles):
        seq = first_seq + i
        bad_here = [reason for at, reason in sorted(problems.items()) if line <= at < bounds[i + 1]]
        doc = parsed.get(pmid)
        if bad_here or doc is None:
            reason = bad_here[0] if bad_here else f"{chunk.path}:{line + chunk.first_line - 1}: malformed document"
            yield _item(chunk, seq, pmid or f"{chunk.path}:{line + chunk.first_line - 1}", error=reason)
        else:
            yield _item(chunk, seq, pmid, doc.text, None if chunk.raw else [[a.start, a.end, a.type] for a in doc.annotations],
                        title_length=doc.title_length)
