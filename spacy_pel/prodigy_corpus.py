"""Corpora annotated in Prodigy (its JSONL tasks, as ``prodigy db-out`` writes them) → the documents of
:mod:`.corpora` (``--format prodigy``; a ``.jsonl`` corpus by default).

Two kinds of task give linked mentions:

* an entity-linking choice task (``entity_linker.manual``, spaCy's entity-linking tutorial): its one
  span is a mention of the option its ``accept`` names; several accepted options are a composite
  mention; an option id starting with ``NIL`` (``NIL_otherLink``, ``NIL_ambiguous``) is ``NIL``;
* a task whose spans carry their own id (``"kb_id"``): each span a mention of its id.

An id (an option's, a span's ``kb_id``) is read as a PubTator id column is: ``D1|D2``, ``D1,D2`` and ``D1+D2``
are a composite mention's two ids, ``-1`` and ``-`` are ``NIL``.

A document's id is its tasks' ``meta.doc_id`` (what ``link --output-format prodigy`` writes), else its
``_input_hash`` (else ``lineN``). Only accepted tasks (``"answer": "accept"``, or no answer: tasks as ``link``
wrote them, not reviewed yet) are read; rejected and ignored ones are left
out and counted by answer. Tasks of the same text (its ``_input_hash``, else the text) and the same
``meta.doc_id`` (or none) are one document: Prodigy asks about one mention a task; two documents of the same
text keep their own ids and mentions. A span's offsets are checked against the text (and against the
span's ``text`` when it has one); its label is the span's ``label`` (``ENTITY`` without one).

``link``'s own JSON lines output (``{"id", "text", "mentions": [{start_char, end_char, text, label, kb_id, …}]}``,
a line with ``mentions`` and no ``spans``) is read too: each line one document, its mentions as linked
(a mention with ``"nil": true``, whatever the linker's NIL label, or with an id starting with ``NIL``, is ``NIL``;
its ``title_length``, where given, keeps where the abstract begins);
an id seen twice is refused.

A malformed line — not JSON, no text, a span outside it or without an id, one mention linked two ways, a
linked document's id seen before, a text, id or label holding a lone surrogate (``"\\ud800"``) — is refused as :class:`~.corpora.CorpusFormatError` (``FILE:LINE:
reason``) or skipped and counted with ``bad_lines``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from . import files
from .corpora import NIL, Annotation, CorpusFormatError, PathLike, PubTatorDoc, parse_ids, surrogate_problem

NIL_PREFIX = "NIL"  # an option id starting with this is NIL (Prodigy's NIL_otherLink, NIL_ambiguous)
NIL_OTHER_LINK = "NIL_otherLink"  # the NIL option a review task offers (``link --output-format prodigy``)
DEFAULT_LABEL = "ENTITY"
READ_ANSWERS = ("accept", None)


def _unicode(value: str, what: str) -> str:
    """``value``, refused (ValueError) when it holds a lone surrogate (``"\\ud800"`` in JSON: no Unicode text)."""
    problem = surrogate_problem(value, what)
    if problem is not None:
        raise ValueError(problem)
    return value


def _ids(raw: List[object]) -> List[str]:
    """The ids of accepted options or of a span's ``kb_id``, each read as a PubTator id column is
    (:func:`~.corpora.parse_ids`: ``D1|D2``, ``D1,D2`` and ``D1+D2`` are a composite's two ids, ``-1`` and ``-``
    NIL); an id starting with ``NIL`` is NIL, an empty one is no id."""
    ids: List[str] = []
    for i in raw:
        if not isinstance(i, (str, int)) or isinstance(i, bool):
            raise ValueError(f"an id must be a string (or a number), not {i!r}")
        _unicode(str(i), f"id {i!r}")
        for part in parse_ids(str(i)) if str(i).strip() else []:
            part = NIL if part.startswith(NIL_PREFIX) else part
            if part not in ids:
                ids.append(part)
    if NIL in ids and len(ids) > 1:
        raise ValueError(f"the task accepts a NIL option beside entities ({', '.join(ids)})")
    return ids


def _task_mentions(task: dict) -> List[Annotation]:
    """The mentions of one accepted task; raises ValueError saying what is wrong with it."""
    text = task.get("text")
    spans = task.get("spans") or []
    if not isinstance(text, str) or not text.strip():
        raise ValueError('a task needs a non-empty "text"')
    _unicode(text, '"text"')
    if not isinstance(spans, list) or not all(isinstance(s, dict) for s in spans):
        raise ValueError('"spans" must be a list of objects')
    accept = task.get("accept")
    if accept is not None and not isinstance(accept, list):
        raise ValueError('"accept" must be a list of option ids')
    shared = _ids(accept) if accept else []
    if shared and sum("kb_id" not in s for s in spans) > 1:
        raise ValueError(f"{len(spans)} spans share the accepted option(s): give each span its own \"kb_id\"")
    out = []
    for span in spans:
        start, end = span.get("start"), span.get("end")
        if not (type(start) is int and type(end) is int and 0 <= start < end <= len(text)):
            raise ValueError(f"span {start!r}-{end!r} is not within the text (0-{len(text)})")
        if "text" in span and span["text"] != text[start:end]:
            raise ValueError(f"span {start}-{end} says {span['text']!r}, the text there is {text[start:end]!r}")
        ids = _ids([span["kb_id"]]) if span.get("kb_id") not in (None, "") else shared
        if not ids:
            raise ValueError(f"span {start}-{end} {text[start:end]!r} has no id: neither a \"kb_id\" nor an accepted option")
        label = span.get("label") or DEFAULT_LABEL
        if not isinstance(label, str):
            raise ValueError(f"span {start}-{end} has a label that is not a string: {label!r}")
        _unicode(label, f"the label of span {start}-{end}")
        out.append(Annotation(start, end, text[start:end], label, ids))
    return out


def _meta_doc_id(task: dict) -> Optional[str]:
    meta = task.get("meta")
    doc_id = meta.get("doc_id") if isinstance(meta, dict) else None
    return doc_id if isinstance(doc_id, str) and doc_id else None


def is_linked_record(task: dict) -> bool:
    """Is ``task`` a line of ``link``'s JSON lines output (``{id, text, mentions}``), not a Prodigy task?"""
    return "mentions" in task and "spans" not in task


def _linked_record(task: dict) -> PubTatorDoc:
    """The document of a line of ``link``'s JSON lines output: its ``id``, ``text`` and linked ``mentions``."""
    doc_id, text, mentions = task.get("id"), task.get("text"), task["mentions"]
    if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool) or not str(doc_id).strip():
        raise ValueError('a record of linked mentions needs an "id"')
    if not isinstance(text, str):
        raise ValueError('a record of linked mentions needs a "text"')
    _unicode(str(doc_id), '"id"')
    _unicode(text, '"text"')
    if not isinstance(mentions, list) or not all(isinstance(m, dict) for m in mentions):
        raise ValueError('"mentions" must be a list of objects')
    if any(not isinstance(m.get("nil", False), bool) for m in mentions):
        raise ValueError('a mention\'s "nil" must be true or false')
    # "nil": true — a NIL mention, its kb_id the linker's NIL label (which may be "CUI-less")
    spans = [{"start": m.get("start_char"), "end": m.get("end_char"), "label": m.get("label"),
              "kb_id": NIL if m.get("nil") else m.get("kb_id"), **({"text": m["text"]} if "text" in m else {})} for m in mentions]
    title = task.get("title_length")
    if title is not None and (not isinstance(title, int) or isinstance(title, bool) or not 0 <= title <= len(text)):
        raise ValueError(f'"title_length" must be a whole number from 0 to the text\'s length, not {title!r}')
    return PubTatorDoc(str(doc_id), text, _task_mentions({"text": text, "spans": spans}) if spans else [], title_length=title)


def read_prodigy(path: PathLike, bad_lines: Optional[files.BadLines] = None,
                 left_out: Optional[Dict[str, int]] = None, named: Optional[Set[str]] = None) -> List[PubTatorDoc]:
    """Read a Prodigy JSONL file (see the module): one document per text (and ``meta.doc_id``), its accepted
    mentions; tasks of other answers are counted in ``left_out`` by answer. A line of ``link``'s JSON lines
    output is one document, its mentions as linked. ``named`` gets the ids the file gives its documents
    (``meta.doc_id``, a linked document's ``id``), not those made of a hash or a line number."""
    path = Path(path)
    left_out = left_out if left_out is not None else {}
    named = named if named is not None else set()
    docs: Dict[tuple, PubTatorDoc] = {}
    first: Dict[tuple, int] = {}  # a document → the line that opened it
    # a mention (document, span, label: a span annotated with two types is two) → (its ids, the line that gave them)
    where: Dict[Tuple[tuple, int, int, str], Tuple[str, int]] = {}
    for lineno, line in files.read_lines(path, CorpusFormatError, bad_lines):
        if not line.strip():
            continue
        try:
            task = json.loads(line)
            if not isinstance(task, dict):
                raise ValueError("a line must be a JSON object (a Prodigy task, or a document of link's JSON lines)")
            if is_linked_record(task):
                record = _linked_record(task)
                key: tuple = ("link", record.pmid, None)
                if key in docs:
                    raise ValueError(f"document {record.pmid} appears twice (first at line {first[key]})")
                for m in record.annotations:
                    m.line = lineno
                docs[key], first[key] = record, lineno
                named.add(record.pmid)
                continue
            answer = task.get("answer")
            if answer not in READ_ANSWERS:
                left_out[str(answer)] = left_out.get(str(answer), 0) + 1
                continue
            mentions = _task_mentions(task)
            text_key = task.get("_input_hash", task["text"])
            if not isinstance(text_key, (str, int)) or isinstance(text_key, bool):
                raise ValueError(f"_input_hash must be a number, not {text_key!r}")
            key = (_meta_doc_id(task), text_key)  # documents of the same text but other ids stay apart
            _unicode(str(key[0] or text_key), '"meta.doc_id"' if key[0] else '"_input_hash"')
            doc = docs.get(key)
            if doc is not None and doc.text != task["text"]:
                raise ValueError(f"_input_hash {text_key!r} names another text too")
            for m in mentions:
                seen = where.get((key, m.start, m.end, m.type))
                if seen is not None and seen[0] != m.kb_id:
                    raise ValueError(f"span {m.start}-{m.end} {m.text!r} ({m.type}) is linked to {m.kb_id} here and to {seen[0]} "
                                     f"at line {seen[1]}")
        except (ValueError, RecursionError) as err:  # json.JSONDecodeError is a ValueError
            message = f"invalid JSON: {err.msg} (column {err.colno})" if isinstance(err, json.JSONDecodeError) else str(err)
            files.reject(CorpusFormatError(path, lineno, message or type(err).__name__), bad_lines)
            continue
        if doc is None:
            doc_id = key[0] or (str(text_key) if "_input_hash" in task else f"line{lineno}")
            doc = docs[key] = PubTatorDoc(doc_id, task["text"])
            first[key] = lineno
            if key[0] is not None:
                named.add(doc_id)
        for m in mentions:
            if (key, m.start, m.end, m.type) not in where:
                where[(key, m.start, m.end, m.type)] = (m.kb_id, lineno)
                m.line = lineno
                doc.annotations.append(m)
    if not docs:
        skipped = f" ({bad_lines.count} malformed line(s) skipped)" if bad_lines is not None and bad_lines.count else ""
        raise CorpusFormatError(path, 1, f"no accepted Prodigy tasks in this file{skipped}")
    for doc in docs.values():
        doc.annotations.sort(key=lambda a: (a.start, a.end))
    return list(docs.values())
