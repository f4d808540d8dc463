"""Linked documents written as files other tools read: JSON lines, PubTator, BioC XML or BioC JSON, Prodigy tasks.

* ``jsonl``: one document a line, ``{"id", "text", "title_length" (a PubTator document's: the text is title + " " +
  abstract), "mentions": [{start_char, end_char, text, label, kb_id, nil,
  score, confidence, candidates: [{id, name, score}]}]}`` — everything the linker set; ``nil`` is true for a NIL
  mention, whose ``kb_id`` is the linker's ``nil_label`` (``NIL``, or one of its own such as ``CUI-less``):
  ``convert`` reads such a mention back as NIL;
* ``pubtator``: ``ID|t|title``, ``ID|a|abstract`` and ``ID<TAB>start<TAB>end<TAB>text<TAB>label<TAB>kb_id``
  lines, ``-1`` for NIL (BC5CDR's convention: what its evaluation scripts and ``convert`` read). A document
  whose title is not known (JSON lines input) is written whole as its title, with an empty abstract, so
  the offsets stay those of its text; line breaks in a text become spaces (the same length); a document or
  entity id holding a tab or a line break is refused, not written (it would be read back as another);
* ``bioc-xml`` / ``bioc-json`` (PyPI ``bioc``): a passage per title and abstract (one when the title is not
  known), an annotation per mention with the ``type`` and ``identifier`` infons ``convert`` reads
  (``-1`` for NIL) and the linker's ``confidence``, ``score`` and ``name`` (its entity's KB name); in XML,
  characters it cannot hold (control characters other than tab and line breaks) are written as spaces;
* ``prodigy``: one entity-linking choice task per mention, for review in Prodigy (``--output-format
  prodigy``): the document's text and its one span, the candidates as options (``ID: name (score)``) and
  ``NIL_otherLink``, the linker's choice pre-selected in ``accept``, the document id and the confidence in
  ``meta``, an ``_input_hash`` of the document id (:func:`input_hash`: documents of the same text stay
  apart). ``convert`` reads the reviewed tasks back (:mod:`spacy_pel.prodigy_corpus`), so corrected links
  become training data.

Every file is written atomically: a run that stops leaves the previous file or none.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Collection, Dict, List, Optional, Sequence, Union

import bioc

from .. import files
from ..bioc_corpus import pubtator_to_bioc
from ..corpora import NIL, Annotation, PubTatorDoc, written_ids
from ..prodigy_corpus import NIL_OTHER_LINK

OUTPUT_FORMATS = ("jsonl", "pubtator", "bioc-xml", "bioc-json", "prodigy")
_BY_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".pubtator": "pubtator", ".txt": "pubtator", ".xml": "bioc-xml",
              ".json": "bioc-json"}
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")  # no XML 1.0 document holds these
_PUBTATOR_BAD_ID = ("|", "\t", "\n", "\r")


@dataclass
class LinkedDoc:
    """One linked document: its id and text, the title's length when the input had a title (PubTator,
    BioC), and one row per mention (:func:`spacy_pel.bulk.worker.mention_rows`)."""

    doc_id: str
    text: str
    title_length: Optional[int] = None
    rows: List[dict] = field(default_factory=list)


def output_format(path: files.PathLike, format: Optional[str] = None) -> str:
    """``format`` if given (checked), else the one of ``path``'s extension."""
    if format is not None:
        if format not in OUTPUT_FORMATS:
            raise files.InputError(f"unknown output format {format!r}; choose one of {', '.join(OUTPUT_FORMATS)}")
        return format
    found = _BY_SUFFIX.get(Path(path).suffix.lower())
    if found is None:
        raise files.InputError(f"{path}: name the output .jsonl, .pubtator (or .txt), .xml (BioC) or .json (BioC), "
                               f"or give --output-format ({', '.join(OUTPUT_FORMATS)})")
    return found


NilLabels = Union[str, Collection[str]]  # the NIL label of the pipeline's linker, or of each of its linkers


def _ids(kb_id: str, nil_label: NilLabels) -> List[str]:
    nils = (nil_label,) if isinstance(nil_label, str) else nil_label
    return [NIL] if kb_id in (NIL, "") or kb_id in nils else [kb_id]


def jsonl_mention(row: dict, nil_label: NilLabels) -> dict:
    """A mention of the ``jsonl`` output: the row as the linker set it, less its ``doc_id``, with ``nil`` (after
    ``kb_id``) true when its ``kb_id`` is a NIL label."""
    out: dict = {}
    for key, value in row.items():
        if key != "doc_id":
            out[key] = value
        if key == "kb_id":
            out["nil"] = _ids(value, nil_label) == [NIL]
    return out


def _xml_safe(text: str) -> str:
    """``text`` with the characters XML cannot hold (control characters but tab and line breaks) as spaces."""
    return _NOT_XML.sub(" ", text)


def _pubtator_doc(doc: LinkedDoc, nil_label: NilLabels, clean: Callable[[str], str] = str) -> PubTatorDoc:
    annotations = [Annotation(r["start_char"], r["end_char"], clean(r["text"]), r["label"], _ids(r["kb_id"], nil_label))
                   for r in doc.rows]
    return PubTatorDoc(clean(doc.doc_id), clean(doc.text), annotations, title_length=doc.title_length)


def _one_line(text: str) -> str:
    """``text`` with line breaks and tabs as spaces (PubTator is line- and tab-separated; same length)."""
    return text.replace("\r", " ").replace("\n", " ").replace("\t", " ")


def check_pubtator_id(doc_id: str) -> None:
    """Refuse a document id that PubTator cannot hold (empty, or with ``|``, a tab or a line break)."""
    if any(c in doc_id for c in _PUBTATOR_BAD_ID) or not doc_id:
        raise files.InputError(f"document id {doc_id!r} cannot be a PubTator id (empty, or with '|', a tab or a line break)")


def pubtator_lines(doc: LinkedDoc, nil_label: NilLabels) -> List[str]:
    """The PubTator lines of one linked document (no blank line after it)."""
    check_pubtator_id(doc.doc_id)
    text = _one_line(doc.text)
    cut = doc.title_length if doc.title_length is not None else len(text)
    lines = [f"{doc.doc_id}|t|{text[:cut]}", f"{doc.doc_id}|a|{text[cut + 1:]}"]
    for r in doc.rows:
        ids = written_ids(_ids(r["kb_id"], nil_label))
        if any(c in ids for c in _PUBTATOR_BAD_ID[1:]):  # a KB built before such ids were refused (kb.id_problem)
            raise files.InputError(f"document {doc.doc_id!r}: entity id {r['kb_id']!r} cannot be written in PubTator "
                                   "(it holds a tab or a line break): rebuild the KB, whose readers now refuse such ids, "
                                   "or write .jsonl")
        lines.append(f"{doc.doc_id}\t{r['start_char']}\t{r['end_char']}\t{_one_line(r['text'])}\t{r['label']}\t{ids}")
    return lines


def bioc_collection(docs: Sequence[LinkedDoc], nil_label: NilLabels, xml: bool = True) -> bioc.BioCCollection:
    """The BioC collection of linked documents (see the module's docstring); for XML, the characters it
    cannot hold (control characters) become spaces, so the offsets stay those of the text."""
    collection = pubtator_to_bioc([_pubtator_doc(d, nil_label, _xml_safe if xml else str) for d in docs])
    collection.source, collection.key = "spacy_pel", "linked"
    for document, doc in zip(collection.documents, docs):
        annotations: Dict[str, bioc.BioCAnnotation] = {a.id: a for p in document.passages for a in p.annotations}
        for i, row in enumerate(doc.rows):
            infons = annotations[f"T{i}"].infons
            top = row["candidates"][0] if row["candidates"] else None
            if row["confidence"] is not None:
                infons["confidence"] = f"{row['confidence']:.4f}"
            if row["score"] is not None:
                infons["score"] = f"{row['score']:.4f}"
            if top is not None and top["id"] == row["kb_id"]:
                infons["name"] = _xml_safe(top["name"]) if xml else top["name"]
    return collection


def input_hash(doc_id: str) -> int:
    """The ``_input_hash`` of a document's review tasks: a signed 32-bit number, as Prodigy's hashes are,
    of its id (not of its text, as Prodigy's own: two documents of the same text are two documents)."""
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf8"), digest_size=4).digest(), "little", signed=True)


def prodigy_tasks(doc: LinkedDoc, nil_label: NilLabels) -> List[dict]:
    """The review tasks of one linked document: one choice task per mention (see the module)."""
    tasks = []
    for r in doc.rows:
        choice = _ids(r["kb_id"], nil_label)[0]
        options = [{"id": c["id"], "text": f"{c['id']}: {c['name']} ({c['score']:.3f})"} for c in r["candidates"]]
        if choice != NIL and choice not in {o["id"] for o in options}:  # a rule's entity outside the top k
            options.insert(0, {"id": choice, "text": choice})
        options.append({"id": NIL_OTHER_LINK, "text": "Link not in options"})
        span = {"start": r["start_char"], "end": r["end_char"], "text": r["text"], "label": r["label"]}
        tasks.append({"text": doc.text, "_input_hash": input_hash(doc.doc_id), "spans": [span],
                      "options": options, "accept": [NIL_OTHER_LINK if choice == NIL else choice],
                      "meta": {"doc_id": doc.doc_id, "confidence": r["confidence"]}})
    return tasks


def write_linked(docs: Sequence[LinkedDoc], path: files.PathLike, format: str, nil_label: NilLabels = NIL) -> None:
    """Write linked documents to ``path`` in ``format`` (:data:`OUTPUT_FORMATS`), atomically."""
    if format not in OUTPUT_FORMATS:
        raise files.InputError(f"unknown output format {format!r}; choose one of {', '.join(OUTPUT_FORMATS)}")
    if format == "jsonl":
        files.write_jsonl(({"id": d.doc_id, "text": d.text,
                            **({"title_length": d.title_length} if d.title_length is not None else {}),
                            "mentions": [jsonl_mention(r, nil_label) for r in d.rows]} for d in docs), path)
        return
    if format == "prodigy":
        files.write_jsonl((task for d in docs for task in prodigy_tasks(d, nil_label)), path)
        return
    if format == "pubtator":
        lines = [line for d in docs for line in (*pubtator_lines(d, nil_label), "")]

        def write(tmp: Path) -> None:
            tmp.write_text("\n".join(lines) + "\n" if lines else "", encoding="utf8")
    else:
        collection = bioc_collection(docs, nil_label, xml=format == "bioc-xml")
        dump = bioc.biocxml.dump if format == "bioc-xml" else bioc.biocjson.dump

        def write(tmp: Path) -> None:
            with tmp.open("w", encoding="utf8") as fp:
                dump(collection, fp)
    files.atomic_write(path, write)

