"""Corpora in BioC (XML and JSON, read with PyPI ``bioc``) → the documents of :mod:`.corpora`.

BioC is how PubTator3, BioCreative and most biomedical corpora are distributed. The rules are those
of the PubTator reader, so a corpus gives the same ``.spacy`` file in either format:

* a document's text is its passages placed at their offsets (a gap between two passages is filled
  with spaces: PubTator's ``title + " " + abstract`` is a title passage at 0 and an abstract passage at
  ``len(title) + 1``); a passage without text is made of its sentences the same way;
* annotations of the document, its passages and their sentences are mentions; their locations are
  offsets into the document text, checked against the annotation's text; one with several locations
  (a discontinuous mention) covers them all and takes the text they cover;
* the mention's type is the ``type`` infon; its ids are the first of the ``identifier``, ``MESH``,
  ``MeSH``, ``NCBI Gene``, ``database_id`` infons, joined by ``|``, ``,`` or ``+``; ``-1`` / ``-`` or
  no id infon is ``NIL`` (as in :func:`.corpora.parse_ids`);
* relations of any level are not mentions: counted by their ``type`` (or ``relation``) infon;
* a malformed input is refused as :class:`BioCFormatError`: ``FILE:LINE: reason`` for XML / JSON
  syntax, ``FILE: document ID, passage at offset N, annotation ID: reason`` for what the file says (a
  text, id or type holding a lone surrogate, JSON's ``"\\ud800"``, too), or
  skipped and counted with ``bad_lines`` (the annotation, or the whole document when its structure is
  wrong).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import bioc
from bioc.biocjson import decoder as json_decoder
from lxml import etree

from . import files
from .corpora import Annotation, CorpusFormatError, PathLike, PubTatorDoc, parse_ids, surrogate_problem, written_ids

ID_INFONS = ("identifier", "MESH", "MeSH", "NCBI Gene", "database_id")
TITLE_TYPES = ("title", "front")  # a first passage of this ``type`` infon is the document's title
COLLECTION = "<collection><source></source><date></date><key></key>{}</collection>"  # one document, decoded by bioc


class BioCFormatError(CorpusFormatError):
    """A BioC file could not be read: ``FILE:LINE: reason`` (syntax) or ``FILE: location: reason``."""

    def __init__(self, path: PathLike, where: str, message: str, line: int = 0):
        files.InputError.__init__(self, f"{path}:{line}: {message}" if line else f"{path}: {where}: {message}")
        self.path, self.line, self.reason, self.where = str(path), line, message, where


def _documents_xml(path: Path) -> Iterator[Tuple[Optional[bioc.BioCDocument], str, Optional[Exception]]]:
    """(document, place, error) per document of a BioC XML file, each ``<document>`` decoded on its own (a
    malformed one costs only itself); XML syntax errors raise FILE:LINE."""
    try:
        with open(path, "rb") as fp:
            for _, element in etree.iterparse(fp, events=("end",), tag="document"):
                doc_id = element.findtext("id")
                place = f"document {doc_id!r}" if doc_id else f"the document at line {element.sourceline}"
                try:
                    document = bioc.biocxml.loads(COLLECTION.format(etree.tostring(element, encoding="unicode")))
                    yield document.documents[0], place, None
                except (KeyError, TypeError, ValueError, AttributeError) as err:  # bioc's decoder: a missing or bad field
                    yield None, place, err
                element.clear()
                while element.getprevious() is not None:  # documents already read: their memory back
                    del element.getparent()[0]
    except etree.XMLSyntaxError as err:
        line = err.lineno if isinstance(err.lineno, int) and err.lineno > 0 else 1
        raise BioCFormatError(path, "", f"not well-formed BioC XML ({err.msg})", line=line) from err


def _documents_json(path: Path) -> Iterator[Tuple[Optional[bioc.BioCDocument], str, Optional[Exception]]]:
    """(document, place, error) per document of a BioC JSON collection; JSON syntax errors raise FILE:LINE."""
    try:
        # a UTF-8 BOM is allowed, as in every other reader (and by the XML parser); lines end at \n only;
        # a byte that is not UTF-8 is FILE:LINE: … at column N, as files.read_lines says it
        obj = json.loads(files.read_text(path, lambda p, line, why: BioCFormatError(p, "", why, line=line)))
    except json.JSONDecodeError as err:
        raise BioCFormatError(path, "", f"not valid JSON ({err.msg}, column {err.colno})", line=err.lineno) from err
    except RecursionError as err:
        raise BioCFormatError(path, "collection", "JSON nested too deeply to be a BioC collection") from err
    if not isinstance(obj, dict) or not isinstance(obj.get("documents"), list):
        raise BioCFormatError(path, "collection", "expected a BioC collection: an object with a `documents` list")
    for i, raw in enumerate(obj["documents"]):
        doc_id = raw.get("id") if isinstance(raw, dict) else None
        place = f"document {doc_id!r}" if isinstance(doc_id, str) else f"document #{i + 1}"
        try:
            yield json_decoder.parse_doc(raw), place, None
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            yield None, place, err


def _structure(err: Exception) -> str:
    if isinstance(err, KeyError):
        return f"missing BioC field {err.args[0]!r}"
    return f"not a BioC document ({type(err).__name__}: {err})"


def _place_text(path: Path, where: str, pieces: List[Tuple[int, str]]) -> str:
    """Texts placed at their offsets; gaps become spaces; an overlap or a negative offset is refused."""
    text = ""
    for offset, piece in pieces:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise BioCFormatError(path, where, f"offset {offset!r} is not an integer ≥ 0")
        if offset < len(text):
            raise BioCFormatError(path, where, f"text at offset {offset} overlaps the text before it (which ends at {len(text)})")
        text += " " * (offset - len(text)) + piece
    return text


def _unicode(path: Path, where: str, value: str, what: str) -> str:
    """``value``, refused when it holds a lone surrogate (BioC JSON's ``"\\ud800"``: no Unicode text)."""
    problem = surrogate_problem(value, what)
    if problem is not None:
        raise BioCFormatError(path, where, problem)
    return value


def _passage_text(path: Path, where: str, passage: bioc.BioCPassage) -> str:
    if passage.text or not passage.sentences:
        if not isinstance(passage.text, str):
            raise BioCFormatError(path, where, f"passage text must be a string, not {type(passage.text).__name__}")
        return _unicode(path, where, passage.text or "", "text")
    if isinstance(passage.offset, bool) or not isinstance(passage.offset, int):
        raise BioCFormatError(path, where, f"offset {passage.offset!r} is not an integer ≥ 0")
    sentences = [(s.offset - passage.offset if isinstance(s.offset, int) else s.offset, s.text or "") for s in passage.sentences]
    return _unicode(path, where, _place_text(path, where, sentences), "text")


def _ids(infons: Dict[str, object]) -> List[str]:
    raw = next((infons[k] for k in ID_INFONS if infons.get(k) not in (None, "")), None)
    return parse_ids(str(raw)) if raw is not None else parse_ids("-1")


def _annotation(path: Path, where: str, ann: bioc.BioCAnnotation, text: str) -> Annotation:
    where = f"{where}, annotation {ann.id!r}"
    infons = ann.infons if isinstance(ann.infons, dict) else {}
    if not ann.locations:
        raise BioCFormatError(path, where, "annotation without a location")
    spans = []
    for loc in ann.locations:
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (loc.offset, loc.length)):
            raise BioCFormatError(path, where, f"location offset and length must be integers, not {loc.offset!r}, {loc.length!r}")
        spans.append((loc.offset, loc.offset + loc.length))
    start, end = min(a for a, _ in spans), max(b for _, b in spans)
    if not (0 <= start < end <= len(text)) or any(b <= a for a, b in spans):
        raise BioCFormatError(path, where, f"location {start}-{end} outside the document text ({len(text)} characters) or empty")
    if len(spans) == 1 and text[start:end] != ann.text:
        raise BioCFormatError(path, where, f"location {start}-{end} gives {text[start:end]!r}, not {ann.text!r}")
    kind = infons.get("type")
    if not isinstance(kind, str) or not kind.strip():
        raise BioCFormatError(path, where, "annotation without a `type` infon")
    ids = _ids(infons)
    for what, value in (("its `type` infon", kind), ("its id", "|".join(ids))):
        _unicode(path, where, value, what)
    return Annotation(start, end, text[start:end], kind, ids)


def _count_relations(relations, counts: Dict[str, int]) -> None:
    for rel in relations:
        infons = rel.infons if isinstance(rel.infons, dict) else {}
        kind = str(infons.get("type") or infons.get("relation") or "relation")
        counts[kind] = counts.get(kind, 0) + 1


def _title_length(passages: List[bioc.BioCPassage], pieces: List[Tuple[int, str]]) -> Optional[int]:
    """The title's length when the first passage is a title at 0 and the next starts after it and a space
    (PubTator's ``title + " " + abstract``): the title is kept as such by ``link``'s outputs; else None."""
    if not passages or passages[0].offset != 0 or str(passages[0].infons.get("type", "")).lower() not in TITLE_TYPES:
        return None
    title = len(pieces[0][1])
    return title if len(passages) == 1 or passages[1].offset == title + 1 else None


def _document(path: Path, document: bioc.BioCDocument, bad_lines: Optional[files.BadLines], relations: Dict[str, int]) -> PubTatorDoc:
    where = f"document {document.id!r}"
    pieces: List[Tuple[int, str]] = []
    found: List[Tuple[str, bioc.BioCAnnotation]] = [(where, a) for a in document.annotations]
    _count_relations(document.relations, relations)
    for passage in document.passages:
        place = f"{where}, passage at offset {passage.offset!r}"
        pieces.append((passage.offset, _passage_text(path, place, passage)))
        found += [(place, a) for a in passage.annotations]
        _count_relations(passage.relations, relations)
        for sentence in passage.sentences:
            found += [(f"{place}, sentence at offset {sentence.offset!r}", a) for a in sentence.annotations]
            _count_relations(sentence.relations, relations)
    text = _place_text(path, where, pieces)
    pdoc = PubTatorDoc(document.id, text, title_length=_title_length(document.passages, pieces))
    for place, ann in found:
        try:
            pdoc.annotations.append(_annotation(path, place, ann, text))
        except BioCFormatError as err:
            files.reject(err, bad_lines)
    pdoc.annotations.sort(key=lambda a: (a.start, a.end))
    return pdoc


def read_bioc(path: PathLike, format: Optional[str] = None, bad_lines: Optional[files.BadLines] = None,
              relations: Optional[Dict[str, int]] = None) -> List[PubTatorDoc]:
    """Read a BioC XML or JSON file (``format`` ``bioc-xml`` / ``bioc-json``; None: ``.json`` is JSON,
    anything else XML): documents with their mentions, offsets checked; relations counted by type."""
    path = Path(path)
    format = format or ("bioc-json" if path.suffix.lower() == ".json" else "bioc-xml")
    if format not in ("bioc-xml", "bioc-json"):
        raise files.InputError(f"{path}: read_bioc reads bioc-xml or bioc-json, not {format}")
    relations = relations if relations is not None else {}
    docs: List[PubTatorDoc] = []
    seen: set = set()
    reader = _documents_xml if format == "bioc-xml" else _documents_json
    for document, place, err in reader(path):
        try:
            if err is not None:
                raise BioCFormatError(path, place, _structure(err))
            if not isinstance(document.id, str) or not document.id.strip():
                raise BioCFormatError(path, place, "document without an id")
            _unicode(path, place, document.id, "its id")
            if document.id in seen:
                raise BioCFormatError(path, f"document {document.id!r}", "document id appears twice")
            seen.add(document.id)
            docs.append(_document(path, document, bad_lines, relations))
        except BioCFormatError as error:
            files.reject(error, bad_lines)
    if not docs:
        skipped = f" ({bad_lines.count} malformed part(s) skipped)" if bad_lines is not None and bad_lines.count else ""
        raise BioCFormatError(path, "collection", f"no BioC documents in this file{skipped}")
    return docs


def pubtator_to_bioc(pdocs: List[PubTatorDoc]) -> bioc.BioCCollection:
    """A BioC collection of PubTator documents (a title passage at 0 and an abstract passage after it,
    or one ``text`` passage when the title is not known; ids joined by ``|``, NIL as ``-1``; the relations left
    out, as relations of their type without nodes)."""
    collection = bioc.BioCCollection()
    collection.source, collection.key = "spacy_pel", "pubtator"
    for pdoc in pdocs:
        document = bioc.BioCDocument()
        document.id = pdoc.pmid
        cut = pdoc.title_length if pdoc.title_length is not None else len(pdoc.text)
        first = "title" if pdoc.title_length is not None else "text"
        for offset, text, kind in ((0, pdoc.text[:cut], first), (cut + 1, pdoc.text[cut + 1 :], "abstract")):
            if offset > len(pdoc.text):
                continue
            passage = bioc.BioCPassage()
            passage.offset, passage.text, passage.infons["type"] = offset, text, kind
            document.add_passage(passage)
        for i, ann in enumerate(pdoc.annotations):
            annotation = bioc.BioCAnnotation()
            annotation.id, annotation.text = f"T{i}", ann.text
            annotation.infons.update(type=ann.type, identifier=written_ids(ann.ids))
            annotation.add_location(bioc.BioCLocation(ann.start, ann.end - ann.start))
            passage = document.passages[-1] if ann.start >= document.passages[-1].offset else document.passages[0]
            passage.add_annotation(annotation)
        for kind, n in pdoc.relations.items():
            for j in range(n):
                relation = bioc.BioCRelation()
                relation.id, relation.infons["type"] = f"R{kind}{j}", kind
                document.add_relation(relation)
        collection.add_document(document)
    return collection
