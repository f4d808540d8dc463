"""Corpora: PubTator files → spaCy ``Doc`` objects with linked entities (and DocBin files).

Rules (documented in the README):

* the text is ``title + " " + abstract``, and PubTator offsets index into it;
* tokens are split at every mention boundary, so every mention becomes a span whose text is exactly
  the annotated text (``span.text == gold text``); a mention that still cannot be aligned (a
  boundary inside white space) is counted and reported, never dropped silently;
* ``kb_id_`` is the gold id; ``-1`` becomes ``NIL``; a composite mention keeps all its ids joined
  by ``|`` in corpus order (NCBI's ``+`` becomes ``|`` too); a prediction of any of them is correct;
* every mention is in the span group ``doc.spans["pel_gold"]``; ``doc.ents`` holds them too, less
  any that overlap a longer one (counted as ``overlapping``; BC5CDR has none);
* BioRED-style files read too: ids joined by ``,``, ``-`` for no id (NIL), relation lines of any
  type (counted in ``relations_skipped``, never mentions);
* a malformed line is refused as ``FILE:LINE: reason`` (:class:`CorpusFormatError`), or skipped and
  counted when the caller asks (``convert(..., skip_bad_lines=True)``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import spacy
from spacy.language import Language
from spacy.tokens import Doc, DocBin, Span
from spacy.util import filter_spans

from . import files
from .kb.entity import ID_SEPARATORS

PathLike = Union[str, Path]
NIL = "NIL"
GOLD_KEY = "pel_gold"
PASSAGES_KEY = "pel_passage_starts"  # doc.user_data: the character offsets where a passage (an abstract) begins
ID_SEP = "|"


class CorpusFormatError(files.LineError):
    """A corpus file could not be read; the message names the file and the line (``FILE:LINE: reason``)."""


def surrogate_problem(value: str, what: str = "text") -> Optional[str]:
    """Why ``value`` (a document's ``what``) is no Unicode text, None if it is: a lone surrogate (JSON's
    ``"\\ud800"``, half an emoji a tool cut), which neither spaCy's tokenizer nor any output file takes. The
    readers of JSON (BioC JSON, Prodigy, ``bulk``'s and ``link``'s raw text) refuse it naming the place."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        return (f"{what} holds a lone surrogate (U+{ord(value[err.start]):04X}) at character {err.start}: "
                "not valid Unicode, UTF-8 cannot encode it")
    return None


@dataclass
class Annotation:
    start: int
    end: int
    text: str
    type: str
    ids: List[str]  # ["NIL"] for a mention without a KB entry
    line: int = 0

    @property
    def kb_id(self) -> str:
        return ID_SEP.join(self.ids)


@dataclass
class PubTatorDoc:
    pmid: str
    text: str
    annotations: List[Annotation] = field(default_factory=list)
    title_length: Optional[int] = None  # PubTator: the text is title + " " + abstract
    relations: Dict[str, int] = field(default_factory=dict)  # relations left out, by type


_ID_SPLIT = re.compile(f"[{re.escape(ID_SEPARATORS)}]")  # `|`, `,`, `+` (BioRED: A,B; NCBI: A+B): never in a KB id


def gold_ids(kb_id: str) -> List[str]:
    """The ids a gold ``kb_id_`` stands for (a composite mention has several): split on ``|``, ``,`` and ``+``
    as every corpus reader splits an id column (no KB id holds one, :func:`.kb.entity.id_problem`), so a
    ``.spacy`` corpus written elsewhere with ``D1+D2`` is the composite it means; each id stripped."""
    return [i.strip() for i in _ID_SPLIT.split(kb_id) if i.strip()]


NO_ID = ("-1", "-")  # BC5CDR writes -1 for a mention without a concept, BioRED writes -


def written_ids(ids: List[str]) -> str:
    """An id column as PubTator (and BioC's ``identifier`` infon) writes it: joined by ``|``, NIL as ``-1``
    (BC5CDR's; what :func:`parse_ids` reads back)."""
    return ID_SEP.join(NO_ID[0] if i == NIL else i for i in ids)


def parse_ids(raw: str) -> List[str]:
    """Gold ids of an id column: joined by ``|`` or ``,`` (BioRED) or ``+`` (NCBI); -1 or - is NIL."""
    ids = gold_ids(raw)
    if not ids or all(i in NO_ID for i in ids):
        return [NIL]
    return [NIL if i in NO_ID else i for i in ids]


_OFFSET = re.compile(r"[0-9]+")
_RELATION_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_PASSAGE = re.compile(r"^([^\t|]*)\|([ta])\|")


@dataclass
class _Reader:
    path: Path
    bad_lines: Optional[files.BadLines]
    relations: Dict[str, int]

    def fail(self, line: int, message: str) -> None:
        files.reject(CorpusFormatError(self.path, line, message), self.bad_lines)


def read_pubtator(
    path: PathLike, bad_lines: Optional[files.BadLines] = None, relations: Optional[Dict[str, int]] = None
) -> List[PubTatorDoc]:
    """Read a PubTator file: documents with their mention annotations, offsets checked.

    Relation lines (``PMID<TAB>type<TAB>id<TAB>id[<TAB>novelty]``: BC5CDR's ``CID``, BioRED's
    ``Association`` …) are not mentions: they are counted by type in ``relations`` and left out.
    A malformed line raises :class:`CorpusFormatError` (``FILE:LINE: reason``), or with ``bad_lines``
    is recorded there and left out. A file without any document is refused either way.
    """
    path = Path(path)
    relations = relations if relations is not None else {}
    r = _Reader(path, bad_lines, relations)
    docs: List[PubTatorDoc] = []
    title: Optional[Tuple[str, str, int]] = None  # (pmid, text, line) of a title waiting for its abstract
    seen: Dict[str, int] = {}  # pmid → line of its title
    current: Optional[PubTatorDoc] = None
    for lineno, line in files.read_lines(path, CorpusFormatError, bad_lines):
        if not line.strip():
            continue
        passage = _PASSAGE.match(line)
        if passage:
            pmid, kind, text = passage.group(1), passage.group(2), line[passage.end() :]
            current = None
            if kind == "t":
                if title is not None:
                    r.fail(title[2], f"title of {title[0]} without an abstract line after it")
                title = None
                if not pmid.strip():
                    r.fail(lineno, "title line without a PMID")
                elif pmid in seen:
                    r.fail(lineno, f"document {pmid} appears twice (first at line {seen[pmid]})")
                else:
                    title = (pmid, text, lineno)
                continue
            if title is None or title[0] != pmid:
                if title is not None:
                    r.fail(title[2], f"title of {title[0]} without an abstract line after it")
                    title = None
                r.fail(lineno, f"abstract of {pmid} without its title line just before it")
                continue
            current = PubTatorDoc(pmid, title[1] + " " + text, title_length=len(title[1]))
            seen[pmid] = title[2]
            title = None
            docs.append(current)
            continue
        if title is not None:
            r.fail(title[2], f"title of {title[0]} without an abstract line after it")
            title = None
        cols = line.split("\t")
        if len(cols) in (4, 5) and not _OFFSET.fullmatch(cols[1]) and _RELATION_TYPE.fullmatch(cols[1]):
            if current is None or cols[0] != current.pmid:
                r.fail(lineno, f"{cols[1]} relation line outside its document")
            else:
                relations[cols[1]] = relations.get(cols[1], 0) + 1
                current.relations[cols[1]] = current.relations.get(cols[1], 0) + 1
            continue
        if current is None or cols[0] != current.pmid:
            r.fail(lineno, "annotation outside its document" if len(cols) > 1 else "expected a PMID|t| title, PMID|a| abstract or tab-separated annotation line")
            continue
        if not 6 <= len(cols) <= 7:
            r.fail(
                lineno,
                f"expected PMID, start, end, text, type, ids (tab-separated; a 7th column for composite "
                f"mentions' parts), not {len(cols)} columns",
            )
            continue
        if not (_OFFSET.fullmatch(cols[1]) and _OFFSET.fullmatch(cols[2])):
            r.fail(lineno, "start and end must be integers")
            continue
        start, end = int(cols[1]), int(cols[2])
        if not (0 <= start < end <= len(current.text)):
            r.fail(lineno, f"offsets {start}-{end} outside the text ({len(current.text)} characters)")
            continue
        if current.text[start:end] != cols[3]:
            r.fail(lineno, f"offsets {start}-{end} give {current.text[start:end]!r}, not {cols[3]!r}")
            continue
        if not cols[4].strip():
            r.fail(lineno, "empty entity type (5th column)")
            continue
        current.annotations.append(Annotation(start, end, cols[3], cols[4], parse_ids(cols[5]), lineno))
    if title is not None:
        r.fail(title[2], f"title of {title[0]} without an abstract line after it")
    if not docs:
        skipped = f" ({bad_lines.count} malformed line(s) skipped)" if bad_lines is not None and bad_lines.count else ""
        raise CorpusFormatError(path, 1, f"no PubTator documents in this file{skipped}")
    return docs


def _aligned_words(nlp: Language, text: str, cuts: Iterable[int]) -> Tuple[List[str], List[bool]]:
    """Tokenise ``text`` with ``nlp``'s tokenizer, forcing token boundaries at ``cuts``."""
    bounds = sorted({0, len(text), *cuts})
    words: List[str] = []
    spaces: List[bool] = []
    for a, b in zip(bounds, bounds[1:]):
        for token in nlp.tokenizer(text[a:b]):
            # a single space opening a segment belongs to the previous word's trailing space
            if token.text == " " and words and not spaces[-1]:
                spaces[-1] = True
                continue
            words.append(token.text)
            spaces.append(bool(token.whitespace_))
    return words, spaces


UNALIGNED_EXAMPLES = 10  # unalignable mentions named in a conversion's stats (the rest counted only)


@dataclass
class ConversionStats:
    docs: int = 0
    mentions: int = 0
    nil: int = 0
    composite: int = 0
    overlapping: int = 0
    unaligned: int = 0
    unaligned_examples: List[str] = field(default_factory=list)
    # relation lines (not mentions) left out, by type: {"CID": 1012}
    relations_skipped: Dict[str, int] = field(default_factory=dict)
    # malformed lines left out at the user's request (convert --skip-bad-lines); 0 otherwise
    skipped_lines: int = 0
    skipped_examples: List[str] = field(default_factory=list)
    # Prodigy tasks not accepted (rejected, ignored), by answer
    left_out_by_answer: Dict[str, int] = field(default_factory=dict)
    # mentions of types the user left out (convert --labels), by type
    left_out_by_label: Dict[str, int] = field(default_factory=dict)
    # mentions whose gold ids an id map rewrote (convert --id-map), by old id
    remapped: Dict[str, int] = field(default_factory=dict)
    # gold ids whose namespace prefix was removed (convert --strip-id-prefix), by prefix
    prefix_stripped: Dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v) for k, v in self.__dict__.items()}


def make_doc(nlp: Language, pdoc: PubTatorDoc, stats: Optional[ConversionStats] = None) -> Doc:
    stats = stats if stats is not None else ConversionStats()
    words, spaces = _aligned_words(nlp, pdoc.text, (x for a in pdoc.annotations for x in (a.start, a.end)))
    doc = Doc(nlp.vocab, words=words, spaces=spaces)
    if doc.text != pdoc.text:  # a tokenizer that alters text cannot be used for gold conversion
        raise ValueError(f"document {pdoc.pmid}: tokenisation changed the text")
    spans: List[Span] = []
    for ann in pdoc.annotations:
        span = doc.char_span(ann.start, ann.end, label=ann.type, kb_id=ann.kb_id, alignment_mode="strict")
        if span is None or span.text != ann.text:
            stats.unaligned += 1
            if len(stats.unaligned_examples) < UNALIGNED_EXAMPLES:
                stats.unaligned_examples.append(
                    f"{pdoc.pmid} {ann.start}-{ann.end} {ann.text!r}: boundary inside white space"
                )
            continue
        spans.append(span)
        stats.mentions += 1
        stats.nil += ann.ids == [NIL]
        stats.composite += len(ann.ids) > 1
    doc.spans[GOLD_KEY] = spans
    ents = filter_spans(spans)
    stats.overlapping += len(spans) - len(ents)
    doc.ents = ents
    doc.user_data["pmid"] = pdoc.pmid
    set_title_length(doc, pdoc.title_length)
    stats.docs += 1
    return doc


def set_title_length(doc: Doc, title_length: Optional[int]) -> Doc:
    """Keep where a PubTator document's abstract begins (its text is title + " " + abstract) as a passage start
    of ``doc``, which no found mention crosses; ``None`` (no title) keeps nothing."""
    if title_length is not None:
        doc.user_data[PASSAGES_KEY] = [title_length + 1]
    return doc


def title_length(doc: Doc) -> Optional[int]:
    """The title length :func:`set_title_length` kept on ``doc`` (``convert`` keeps it in ``.spacy`` corpora), else None."""
    starts = doc.user_data.get(PASSAGES_KEY)
    return starts[0] - 1 if starts else None


def pubtator_to_docs(
    nlp: Language, path: PathLike, stats: Optional[ConversionStats] = None, bad_lines: Optional[files.BadLines] = None
) -> Iterator[Doc]:
    """Docs of a PubTator file (see :func:`read_pubtator`); relations and skipped lines go to ``stats``."""
    stats = stats if stats is not None else ConversionStats()
    pdocs = read_pubtator(path, bad_lines, stats.relations_skipped)
    if bad_lines is not None:
        stats.skipped_lines, stats.skipped_examples = bad_lines.count, list(bad_lines.examples)
    for pdoc in pdocs:
        yield make_doc(nlp, pdoc, stats)


def write_docbin(docs: Iterable[Doc], path: PathLike) -> int:
    """Write docs (with user data) to a ``.spacy`` file atomically; returns the count."""
    db = DocBin(store_user_data=True)
    n = 0
    for doc in docs:
        db.add(doc)
        n += 1
    files.atomic_write(path, db.to_disk)
    return n


def read_docbin(nlp: Language, path: PathLike) -> List[Doc]:
    """The docs of a ``.spacy`` file; a missing file or one that is not a DocBin is refused in one line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus not found: {path}" if not path.exists() else f"corpus {path} is not a file")
    try:
        db = DocBin().from_disk(path)
    except Exception as err:  # zlib / msgpack errors of a file that is not a DocBin
        raise files.InputError(f"{path}: not a .spacy DocBin file ({type(err).__name__}: {err})") from err
    return list(db.get_docs(nlp.vocab))


def gold_spans(doc: Doc) -> Sequence[Span]:
    return doc.spans[GOLD_KEY] if GOLD_KEY in doc.spans else doc.ents


def require_gold_spans(path: PathLike, docs: Sequence[Doc], purpose: str) -> None:
    """Refuse (``InputError``) a corpus none of whose documents has a gold span: ``purpose`` (a span model
    learning, or picking its threshold on, nothing) says what would go wrong."""
    if not any(gold_spans(doc) for doc in docs):
        raise files.InputError(f"{path}: none of its {len(docs)} documents has a gold span: {purpose}; give a corpus "
                               "with its annotations (convert reads them)")


def _with_passages(new: Doc, doc: Doc) -> Doc:
    if doc.user_data.get(PASSAGES_KEY):
        new.user_data[PASSAGES_KEY] = list(doc.user_data[PASSAGES_KEY])
    return new


def bare_doc(doc: Doc, vocab=None) -> Doc:
    """A new doc with ``doc``'s tokens and whitespace only (no entities, spans or ids): raw text as a
    pipeline would see it, with the gold tokenisation so its spans line up with the gold ones, and its
    passages (a PubTator title and abstract: no found mention crosses from one into the other)."""
    return _with_passages(Doc(vocab or doc.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc]), doc)


def raw_doc(nlp: Language, doc: Doc) -> Doc:
    """``doc``'s text as a user gives it to ``nlp`` (its tokenizer's tokens), with its passages, as ``link`` reads
    the PubTator file it came from."""
    return _with_passages(nlp.make_doc(doc.text), doc)


def corpus_ids(docs: Iterable[Doc]) -> set:
    return {i for doc in docs for span in gold_spans(doc) for i in gold_ids(span.kb_id_) if i != NIL}


def convert(input: Path, output: Path, lang: str = "en", skip_bad_lines: bool = False) -> dict:
    """Convert ``input`` (PubTator) to ``output`` (.spacy); returns the conversion statistics.

    A malformed line stops the conversion with ``FILE:LINE: reason`` and writes nothing; with
    ``skip_bad_lines`` it is left out and counted (``skipped_lines``, ``skipped_examples``).
    """
    input = Path(input)
    if not input.is_file():
        raise FileNotFoundError(f"PubTator file not found: {input}" if not input.exists() else f"{input} is not a file")
    nlp = spacy.blank(lang)
    stats = ConversionStats()
    write_docbin(pubtator_to_docs(nlp, input, stats, files.BadLines() if skip_bad_lines else None), output)
    return stats.as_dict()
