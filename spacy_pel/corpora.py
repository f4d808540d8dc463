"""Corpora: PubTator files → spaCy ``Doc`` objects with linked entities (and DocBin files).

Rules (documented in the README):

* the text is ``title + " " + abstract``, and PubTator offsets index into it;
* tokens are split at every mention boundary, so every mention becomes a span whose text is exactly
  the annotated text (``span.text == gold text``); a mention that still cannot be aligned (a
  boundary inside white space) is counted and reported, never dropped silently;
* ``kb_id_`` is the gold id; ``-1`` becomes ``NIL``; a composite mention keeps all its ids joined
  by ``|`` in corpus order (NCBI's ``+`` becomes ``|`` too); a prediction of any of them is correct;
* every mention is in the span group ``doc.spans["pel_gold"]``; ``doc.ents`` holds them too, less
  any that overlap a longer one (counted as ``overlapping``; BC5CDR has none).
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

PathLike = Union[str, Path]
NIL = "NIL"
GOLD_KEY = "pel_gold"
ID_SEP = "|"


class CorpusFormatError(ValueError):
    def __init__(self, path: PathLike, line: int, message: str):
        self.path, self.line = str(path), line
        super().__init__(f"{path}:{line}: {message}")


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


def gold_ids(kb_id: str) -> List[str]:
    """The ids a gold ``kb_id_`` stands for (a composite mention has several)."""
    return [i for i in kb_id.split(ID_SEP) if i]


def _parse_ids(raw: str) -> List[str]:
    ids = [i.strip() for i in re.split(r"[|+]", raw) if i.strip()]
    if not ids or ids == ["-1"]:
        return [NIL]
    return [NIL if i == "-1" else i for i in ids]


def read_pubtator(path: PathLike) -> List[PubTatorDoc]:
    """Read a PubTator file; relation lines (``CID``) are skipped; offsets are checked."""
    path = Path(path)
    docs: List[PubTatorDoc] = []
    title: Dict[str, str] = {}
    current: Optional[PubTatorDoc] = None
    with path.open(encoding="utf8") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            if "|t|" in line[:40] and "\t" not in line.split("|t|")[0]:
                pmid, text = line.split("|t|", 1)
                title[pmid] = text
                current = None
                continue
            if "|a|" in line[:40] and "\t" not in line.split("|a|")[0]:
                pmid, text = line.split("|a|", 1)
                if pmid not in title:
                    raise CorpusFormatError(path, lineno, f"abstract of {pmid} without a title line")
                current = PubTatorDoc(pmid, title.pop(pmid) + " " + text)
                docs.append(current)
                continue
            cols = line.split("\t")
            if len(cols) >= 2 and cols[1] == "CID":
                continue
            if current is None or cols[0] != current.pmid:
                raise CorpusFormatError(path, lineno, "annotation outside its document")
            if len(cols) < 6:
                raise CorpusFormatError(path, lineno, "expected PMID, start, end, text, type, ids (tab-separated)")
            try:
                start, end = int(cols[1]), int(cols[2])
            except ValueError:
                raise CorpusFormatError(path, lineno, "start and end must be integers") from None
            if not (0 <= start < end <= len(current.text)):
                raise CorpusFormatError(path, lineno, f"offsets {start}-{end} outside the text")
            if current.text[start:end] != cols[3]:
                raise CorpusFormatError(
                    path, lineno, f"offsets {start}-{end} give {current.text[start:end]!r}, not {cols[3]!r}"
                )
            current.annotations.append(Annotation(start, end, cols[3], cols[4], _parse_ids(cols[5]), lineno))
    if title:
        raise CorpusFormatError(path, 0, f"{len(title)} title(s) without an abstract, e.g. {next(iter(title))}")
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


@dataclass
class ConversionStats:
    docs: int = 0
    mentions: int = 0
    nil: int = 0
    composite: int = 0
    overlapping: int = 0
    unaligned: int = 0
    unaligned_examples: List[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


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
            if len(stats.unaligned_examples) < 10:
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
    stats.docs += 1
    return doc


def pubtator_to_docs(nlp: Language, path: PathLike, stats: Optional[ConversionStats] = None) -> Iterator[Doc]:
    stats = stats if stats is not None else ConversionStats()
    for pdoc in read_pubtator(path):
        yield make_doc(nlp, pdoc, stats)


def write_docbin(docs: Iterable[Doc], path: PathLike) -> int:
    """Write docs (with user data) to a ``.spacy`` file atomically; returns the count."""
    path = Path(path)
    db = DocBin(store_user_data=True)
    n = 0
    for doc in docs:
        db.add(doc)
        n += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    db.to_disk(tmp)
    tmp.replace(path)
    return n


def read_docbin(nlp: Language, path: PathLike) -> List[Doc]:
    return list(DocBin().from_disk(path).get_docs(nlp.vocab))


def gold_spans(doc: Doc) -> Sequence[Span]:
    return doc.spans[GOLD_KEY] if GOLD_KEY in doc.spans else doc.ents


def corpus_ids(docs: Iterable[Doc]) -> set:
    return {i for doc in docs for span in gold_spans(doc) for i in gold_ids(span.kb_id_) if i != NIL}


def convert(input: Path, output: Path, lang: str = "en") -> dict:
    """Convert ``input`` (PubTator) to ``output`` (.spacy); returns the conversion statistics."""
    nlp = spacy.blank(lang)
    stats = ConversionStats()
    write_docbin(pubtator_to_docs(nlp, input, stats), output)
    return stats.as_dict()
