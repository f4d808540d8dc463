"""Link one corpus file in this process and write it as JSON lines, PubTator or BioC: :func:`link_file`
(``python -m spacy_pel link``), the small-scale counterpart of :func:`.run.link_corpus` (no Ray, one
output file in a format other tools read: :mod:`.linked_formats`).

Input, by ``format`` or the file's extension:

* PubTator (``.txt``, ``.pubtator``, any other), BioC XML (``.xml``), BioC JSON (``.json``), Prodigy tasks
  (``--format prodigy``: accepted ones, the others counted by answer) or a ``.spacy`` corpus (``convert``'s
  output, its gold mentions; ids from its docs' ``pmid``, else their rank): the mentions are given: every
  one of them is linked (overlapping ones too; their ids in the file are not read; one whose boundary
  falls inside white space cannot be a span: it is counted as ``unaligned``), read as ``convert`` reads
  a corpus (a malformed line stops the run with its ``FILE:LINE``, or is skipped and counted); a file
  without any mention is raw text, as below;
* JSON lines (``.jsonl``, ``.ndjson``) or Parquet (``.parquet``) of ``{id, text}``: raw text, whose
  mentions the pipeline's NER or span finder finds (a pipeline that has neither is refused), read as
  a ``bulk`` shard is read.

PubTator, BioC and Prodigy output hold one document per id: a document id seen twice in the input is
refused (``FILE:LINE``) before anything is linked. So is a raw text longer than the pipeline's
``nlp.max_length`` (spaCy's 1,000,000 characters; ``max_length`` raises it), which spaCy would refuse
halfway through the run: split it, or raise the limit (spaCy's NER and parser need about 1 GB of memory per
100,000 characters). Given mentions make the doc from words, which no limit checks.

The documents are linked in batches by :class:`.worker.LinkWorker` (given spans are linked, overlapping
ones included, and the pipeline's own NER is left out, as in ``bulk``) with every torch thread of this process.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import spacy
import torch
from tqdm.auto import tqdm

from .. import files
from ..bioc_corpus import read_bioc
from ..corpora import NIL, Annotation, PubTatorDoc, gold_spans, read_docbin, read_pubtator, title_length
from ..corpus_formats import FORMATS as CORPUS_FORMATS
from ..corpus_formats import corpus_format
from ..pipeline.mention_finders import check_mention_source
from ..prodigy_corpus import read_prodigy
from .linked_formats import LinkedDoc, check_pubtator_id, output_format, write_linked
from .shards import NO_TITLE, Shard, plan_chunks, read_chunk
from .worker import LinkWorker

RAW_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}  # {id, text} files, read as bulk shards
UNIQUE_ID_OUTPUTS = ("pubtator", "bioc-xml", "bioc-json", "prodigy")  # a document per id: what convert reads back
INPUT_FORMATS = (*CORPUS_FORMATS, "jsonl", "parquet")
ALL_DOCS = 1 << 62  # one chunk holds the whole file


def input_format(path: files.PathLike, format: Optional[str] = None) -> str:
    """``format`` if given (checked), else the one of ``path``'s extension: JSON lines or Parquet, else as
    ``convert`` reads a corpus (:func:`~spacy_pel.corpus_formats.corpus_format`: PubTator by default)."""
    if format is not None and format not in INPUT_FORMATS:
        raise files.InputError(f"unknown input format {format!r}; choose one of {', '.join(INPUT_FORMATS)}")
    raw = RAW_FORMATS.get(Path(path).suffix.lower()) if format is None else None
    return raw or (format if format in RAW_FORMATS.values() else corpus_format(path, format))


def _annotated_items(docs: List[PubTatorDoc], where: Callable[[int, PubTatorDoc], str]) -> List[Tuple[dict, Optional[int]]]:
    """Items of PubTator / BioC / Prodigy / .spacy documents: their mentions given, or raw text when no
    document of the file has a mention (abstracts as PubMed exports them: the pipeline finds the mentions).
    ``where``: the place of the ``n``-th document in its file, as an error names it."""
    given = any(d.annotations for d in docs)
    return [({"doc_id": d.pmid, "text": d.text, "error": "", "where": where(n, d),
              "spans": json.dumps([[a.start, a.end, a.type] for a in d.annotations]) if given else "",
              "title_length": NO_TITLE if d.title_length is None else d.title_length}, d.title_length)
            for n, d in enumerate(docs)]


def read_documents(path: Path, format: str, bad_lines: Optional[files.BadLines] = None,
                   left_out: Optional[Dict[str, int]] = None) -> List[Tuple[dict, Optional[int]]]:
    """``(item, title length)`` of every document of ``path`` (an item as :class:`.worker.LinkWorker` links
    it: ``doc_id``, ``text`` and the given ``spans``, or ``""`` for raw text; ``where``: its place in the file,
    ``FILE:LINE`` where there are lines). A malformed document raises its ``FILE:LINE``, or with ``bad_lines``
    is recorded there and left out; a file with no document left is refused, whatever its format. Prodigy
    tasks not accepted are counted in ``left_out`` by answer."""
    kept = _read_items(path, format, bad_lines, left_out if left_out is not None else {})
    if not kept:
        raise files.InputError(f"{path}: no document to link" + (f" ({bad_lines.count} malformed skipped)" if bad_lines else ""))
    return kept


def _line_numbers(path: Path) -> List[int]:
    """The line number of each non-blank line of a text file (a JSON lines document's place)."""
    with open(path, "rb") as f:
        return [n for n, raw in enumerate(f, start=1) if raw.strip()]


def _read_items(path: Path, format: str, bad_lines: Optional[files.BadLines],
                left_out: Dict[str, int]) -> List[Tuple[dict, Optional[int]]]:
    if format == "pubtator":
        return _annotated_items(read_pubtator(path, bad_lines), lambda n, d: f"{path}: document {d.pmid}")
    if format in ("bioc-xml", "bioc-json"):
        return _annotated_items(read_bioc(path, format, bad_lines), lambda n, d: f"{path}: document {d.pmid}")
    if format == "prodigy":  # a document's place: the line of its first task that gave a mention
        return _annotated_items(read_prodigy(path, bad_lines, left_out),
                                lambda n, d: f"{path}:{d.annotations[0].line}" if d.annotations else f"{path}: document {n + 1}")
    if format == "spacy":
        docs = read_docbin(spacy.blank("en"), path)
        return _annotated_items([PubTatorDoc(str(d.user_data.get("pmid", n)), d.text, [
            Annotation(s.start_char, s.end_char, s.text, s.label_, [NIL]) for s in gold_spans(d)], title_length(d))
            for n, d in enumerate(docs)], lambda n, d: f"{path}: document {n + 1}")
    (chunk,) = plan_chunks(Shard(str(path), path.name, format), ALL_DOCS) or [None]
    items = [] if chunk is None else list(read_chunk(chunk.as_item()))
    lines = _line_numbers(path) if format == "jsonl" else []
    kept = []
    for item in items:
        if item["error"]:  # already "FILE:LINE: reason" (a Parquet row: "FILE#rowN: reason")
            if bad_lines is None:
                raise files.InputError(item["error"])
            bad_lines.add(files.InputError(item["error"]))
            continue
        seq = item["seq"]
        item["where"] = f"{path}:{lines[seq]}" if seq < len(lines) else f"{path}#row{seq}"
        kept.append((item, None))
    return kept


def check_unique_ids(documents: Sequence[Tuple[dict, Optional[int]]], output_format: str) -> None:
    """Refuse (``InputError``, one line) a document id seen twice, for an output format that holds one
    document per id (:data:`UNIQUE_ID_OUTPUTS`: ``convert`` refuses such a file, Prodigy's tasks would merge)."""
    if output_format not in UNIQUE_ID_OUTPUTS:
        return
    first: Dict[str, str] = {}
    for item, _ in documents:
        doc_id = item["doc_id"]
        if doc_id in first:
            raise files.InputError(f"{item['where']}: document id {doc_id!r} appears twice (first at {first[doc_id]}); "
                                   f"{output_format} output needs one id per document (write .jsonl, or give unique ids)")
        first[doc_id] = item["where"]


def check_lengths(documents: Sequence[Tuple[dict, Optional[int]]], max_length: int) -> None:
    """Refuse (``InputError``, one line naming the document) a raw text longer than ``max_length``, the
    pipeline's ``nlp.max_length``, before anything is linked (``nlp.make_doc`` would raise mid-run)."""
    for item, _ in documents:
        if len(item["text"]) > max_length:
            raise files.InputError(
                f"{item['where']}: text of {len(item['text'])} characters exceeds the pipeline's nlp.max_length "
                f"({max_length}): split it into shorter documents, or raise the limit (link --max-length N; spaCy's NER "
                "and parser need about 1 GB of memory per 100,000 characters)")


def link_file(input: files.PathLike, output: files.PathLike, pipeline: files.PathLike, *, format: Optional[str] = None,
              output_format_name: Optional[str] = None, batch_size: int = 1000, skip_bad_lines: bool = False,
              progress: bool = True, max_length: Optional[int] = None) -> dict:
    """Link every document of ``input`` with the saved ``pipeline`` and write them to ``output`` (see the
    module's docstring), with a progress bar (documents, and mentions/s) unless ``progress`` is false. Returns the counts:
    documents, mentions, NIL, given mentions not linked (``unaligned``, with examples: a boundary inside white
    space; ``overlapping_not_linked``: a pipeline with a component after its linker links ``doc.ents`` only;
    ``not_linked_by_label``: those of a label no linker links, by label),
    Prodigy tasks not accepted (by answer), malformed lines skipped, seconds and mentions/s of the linking.
    ``max_length``: the pipeline's ``nlp.max_length`` for this run (None: as loaded, spaCy's 1,000,000)."""
    input, output, pipeline = Path(input), Path(output), Path(pipeline)
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
        raise files.InputError(f"max_length must be a whole number ≥ 1, not {max_length!r}")
    if not input.is_file():
        raise FileNotFoundError(f"input not found: {input}" if not input.exists() else f"input {input} is not a file")
    fmt, out_fmt = input_format(input, format), output_format(output, output_format_name)
    bad = files.BadLines() if skip_bad_lines else None
    left_out: Dict[str, int] = {}
    documents = read_documents(input, fmt, bad, left_out)
    if out_fmt == "pubtator":  # before linking: a refusal after it would lose the work
        for item, _ in documents:
            check_pubtator_id(item["doc_id"])
    check_unique_ids(documents, out_fmt)
    raw = not documents[0][0]["spans"]
    check_mention_source(pipeline, str(input) if raw else None, given=not raw)
    worker = LinkWorker(str(pipeline), threads=torch.get_num_threads(), batch_size=batch_size)
    if max_length is not None:
        worker.nlp.max_length = max_length
    if raw or not worker.uses_given:  # the docs of raw text are made by nlp.make_doc, which checks the length
        check_lengths(documents, worker.nlp.max_length)
    linked: List[LinkedDoc] = []
    started, mentions = time.perf_counter(), 0
    with tqdm(total=len(documents), desc="linking", unit=" docs", disable=not progress) as bar:
        for i in range(0, len(documents), batch_size):
            batch = documents[i : i + batch_size]
            for (item, title), rows in zip(batch, worker.link([item for item, _ in batch])):
                linked.append(LinkedDoc(item["doc_id"], item["text"], title, rows))
                mentions += len(rows)
            bar.update(len(batch))
            bar.set_postfix(mentions_per_s=round(mentions / max(time.perf_counter() - started, 1e-9)))
    seconds = time.perf_counter() - started
    write_linked(linked, output, out_fmt, worker.nil_labels)
    return {"input": str(input), "format": fmt, "output": str(output), "output_format": out_fmt, "docs": len(linked),
            "mentions": mentions, "nil": sum(r["kb_id"] in worker.nil_labels for d in linked for r in d.rows),
            "unaligned": worker.stats.unaligned, "unaligned_examples": list(worker.stats.unaligned_examples),
            "overlapping_not_linked": worker.stats.overlapping,  # 0 where the worker links overlapping mentions
            "not_linked_by_label": dict(worker.stats.left_out_by_label),  # of labels no linker links
            "left_out_by_answer": left_out,
            "skipped_lines": bad.count if bad else 0, "skipped_examples": list(bad.examples) if bad else [],
            "seconds": round(seconds, 2), "mentions_per_s": round(mentions / seconds, 1) if seconds > 0 else None}
