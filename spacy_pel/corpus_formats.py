"""Any annotated corpus → one ``.spacy`` file: PubTator (:mod:`.corpora`), BioC XML / JSON
(:mod:`.bioc_corpus`), Prodigy JSONL (:mod:`.prodigy_corpus`) or ``.spacy`` files, several of them
concatenated (training on several corpora for one KB); a document whose id an earlier input had is
refused, naming both files (or left out and counted with ``skip_bad_lines``).

The format is ``--format`` when given, else the file's extension: ``.xml`` BioC XML, ``.json`` BioC JSON,
``.jsonl`` Prodigy tasks (or ``link``'s JSON lines output), ``.spacy`` a DocBin, anything else PubTator.
Every format's gold ids follow PubTator's rule (:func:`.corpora.parse_ids`): a ``.spacy`` input's ``D1+D2`` or
``D1,D2`` becomes the composite ``D1|D2``, its ``-1`` or ``-`` ``NIL`` (a span without an id keeps none).
``labels`` keeps the mentions of those types only (BC5CDR's diseases beside a disease corpus); the others
are counted as ``left_out_by_label``, never silently lost.
``id_map`` rewrites gold ids annotated against an older KB release (:mod:`.id_map`), counted as ``remapped``,
after ``strip_prefixes`` has removed a namespace the KB's ids lack (``UMLS:``), counted as ``prefix_stripped``.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Collection, Dict, Iterator, List, Optional, Sequence, Set

import spacy
from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.util import filter_spans

from . import files
from .bioc_corpus import read_bioc
from .corpora import (
    GOLD_KEY,
    ID_SEP,
    NIL,
    ConversionStats,
    PathLike,
    gold_ids,
    gold_spans,
    make_doc,
    parse_ids,
    read_docbin,
    read_pubtator,
    write_docbin,
)
from .id_map import map_ids, strip_prefixes
from .prodigy_corpus import read_prodigy

log = logging.getLogger(__name__)
TEXT_KEY = "\0text:"  # in ``earlier``: the text of a Prodigy document without an id of its own
FORMATS = ("pubtator", "bioc-xml", "bioc-json", "prodigy", "spacy")
_BY_SUFFIX = {".xml": "bioc-xml", ".json": "bioc-json", ".jsonl": "prodigy", ".spacy": "spacy"}


def corpus_format(path: PathLike, format: Optional[str] = None) -> str:
    """``format`` if given (checked), else the one of ``path``'s extension (PubTator by default)."""
    if format is not None:
        if format not in FORMATS:
            raise files.InputError(f"unknown corpus format {format!r}; choose one of {', '.join(FORMATS)}")
        return format
    return _BY_SUFFIX.get(Path(path).suffix.lower(), "pubtator")


def _earlier(path: Path, doc_id: Optional[str], earlier: Optional[Dict[str, str]], bad_lines: Optional[files.BadLines]) -> bool:
    """Is ``doc_id`` one of an earlier input (``earlier``: id → its file)? Refused (``InputError``, one line
    naming both files), or with ``bad_lines`` recorded there: the caller leaves the document out."""
    if earlier is None or doc_id is None or doc_id not in earlier:
        return False
    error = files.InputError(f"{path}: document {doc_id} is in an earlier input too ({earlier[doc_id]}): the same document "
                             "twice in the output; give each document once")
    if bad_lines is None:
        raise error
    bad_lines.add(error)
    return True


def corpus_docs(nlp: Language, path: PathLike, format: Optional[str] = None, stats: Optional[ConversionStats] = None,
                bad_lines: Optional[files.BadLines] = None, labels: Optional[Collection[str]] = None,
                id_map: Optional[Dict[str, str]] = None, strip: Sequence[str] = (),
                earlier: Optional[Dict[str, str]] = None) -> Iterator[Doc]:
    """The gold docs of one corpus file in any supported format; counts go to ``stats``. With ``labels``,
    only mentions of those types are kept (the others counted in ``stats.left_out_by_label``); with
    ``strip``, those prefixes are removed from gold ids (:func:`.id_map.strip_prefixes`), then with
    ``id_map`` they are rewritten (:func:`.id_map.map_ids`, counted in ``stats.remapped``). With
    ``earlier`` (document id → the earlier input that had it), a document whose id the file names (a
    PMID, a BioC id, a ``.spacy`` doc's ``pmid``, a Prodigy ``meta.doc_id``) and an earlier input had is
    refused, or with ``bad_lines`` left out and counted there; once the file is read, its ids are added
    to ``earlier``."""
    stats = stats if stats is not None else ConversionStats()
    keep = None if labels is None else set(labels)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus not found: {path}" if not path.exists() else f"corpus {path} is not a file")
    format = corpus_format(path, format)
    own: Dict[Optional[str], str] = {}  # the ids this file names → it, for the inputs after it
    if format == "spacy":
        for doc in read_docbin(nlp, path):
            pmid = None if doc.user_data.get("pmid") is None else str(doc.user_data["pmid"])
            if _earlier(path, pmid, earlier, bad_lines):
                continue
            own.setdefault(pmid, str(path))
            if keep is not None:
                _keep_labels(doc, keep, stats)
            _parse_gold_ids(doc)
            if id_map or strip:
                _map_gold_ids(doc, id_map or {}, strip, stats)
            stats.docs += 1
            spans = gold_spans(doc)
            stats.mentions += len(spans)
            stats.nil += sum(s.kb_id_ == NIL for s in spans)
            stats.composite += sum(len(gold_ids(s.kb_id_)) > 1 for s in spans)
            stats.overlapping += len(spans) - len(filter_spans(spans))  # as make_doc counts them
            yield doc
        _remember(earlier, own)
        return
    if format == "pubtator":
        pdocs = read_pubtator(path, bad_lines, stats.relations_skipped)
    elif format == "prodigy":
        named: Set[str] = set()  # ids of the file's own, not hashes of a text
        pdocs = read_prodigy(path, bad_lines, stats.left_out_by_answer, named)
    else:
        pdocs = read_bioc(path, format, bad_lines, stats.relations_skipped)
    if bad_lines is not None:
        stats.skipped_lines, stats.skipped_examples = bad_lines.count, list(bad_lines.examples)
    same_text: List[str] = []  # earlier inputs with a text of a document here that has no id of its own
    for pdoc in pdocs:
        doc_id = pdoc.pmid if format != "prodigy" or pdoc.pmid in named else None
        if _earlier(path, doc_id, earlier, bad_lines):
            stats.skipped_lines, stats.skipped_examples = bad_lines.count, list(bad_lines.examples)
            continue
        if doc_id is None and earlier is not None:  # Prodigy tasks without meta.doc_id: a text is all there is
            same_text += [earlier[TEXT_KEY + pdoc.text]] if TEXT_KEY + pdoc.text in earlier else []
            doc_id = TEXT_KEY + pdoc.text
        own.setdefault(doc_id, str(path))
        if keep is not None:
            for ann in pdoc.annotations:
                if ann.type not in keep:
                    stats.left_out_by_label[ann.type] = stats.left_out_by_label.get(ann.type, 0) + 1
            pdoc.annotations = [a for a in pdoc.annotations if a.type in keep]
        if id_map or strip:
            for ann in pdoc.annotations:
                ann.ids = _rewrite(ann.ids, id_map or {}, strip, stats)
        yield make_doc(nlp, pdoc, stats)
    if same_text:  # not refused: annotations of other labels on the same texts may come in two datasets
        log.warning(f"{path}: {len(same_text)} document(s) without an id (no meta.doc_id) have the text of one in an "
                    f"earlier input ({same_text[0]}); each is kept as a document of its own (one input file of all "
                    "their tasks makes them one document)")
    _remember(earlier, own)


def _remember(earlier: Optional[Dict[str, str]], own: Dict[Optional[str], str]) -> None:
    if earlier is not None:
        earlier.update({k: v for k, v in own.items() if k is not None and k not in earlier})


def _keep_labels(doc: Doc, keep: set, stats: ConversionStats) -> None:
    """Drop the gold mentions of ``doc`` (a ``.spacy`` input) whose label is not in ``keep``."""
    spans = list(gold_spans(doc))
    for span in spans:
        if span.label_ not in keep:
            stats.left_out_by_label[span.label_] = stats.left_out_by_label.get(span.label_, 0) + 1
    set_gold_spans(doc, [s for s in spans if s.label_ in keep])


def _rewrite(ids: List[str], id_map: Dict[str, str], strip: Sequence[str], stats: ConversionStats) -> List[str]:
    """A mention's gold ids without the ``strip`` prefixes, then through ``id_map``."""
    return map_ids(strip_prefixes(ids, strip, stats.prefix_stripped), id_map, stats.remapped)


def _parse_gold_ids(doc: Doc) -> None:
    """The gold ids of ``doc`` (a ``.spacy`` input) read as a PubTator id column is (:func:`.corpora.parse_ids`):
    ``D1+D2`` and ``D1,D2`` become ``D1|D2``, ``-1`` and ``-`` ``NIL``; a span without an id keeps none. The
    spans are rewritten only when an id changes."""
    spans = list(gold_spans(doc))
    ids = [ID_SEP.join(parse_ids(s.kb_id_)) if s.kb_id_.strip() else s.kb_id_ for s in spans]
    if any(new != s.kb_id_ for new, s in zip(ids, spans)):
        set_gold_spans(doc, [s if new == s.kb_id_ else Span(doc, s.start, s.end, label=s.label_, kb_id=new)
                             for new, s in zip(ids, spans)])


def _map_gold_ids(doc: Doc, id_map: Dict[str, str], strip: Sequence[str], stats: ConversionStats) -> None:
    """Rewrite the gold ids of ``doc`` (a ``.spacy`` input): ``strip`` prefixes removed, then ``id_map``."""
    set_gold_spans(doc, [Span(doc, s.start, s.end, label=s.label_,
                               kb_id=ID_SEP.join(_rewrite(gold_ids(s.kb_id_), id_map, strip, stats)))
                          for s in gold_spans(doc)])


def set_gold_spans(doc: Doc, spans: List[Span]) -> None:
    """``spans`` as the gold mentions of ``doc`` (a ``.spacy`` input), and the non-overlapping ones as its ents."""
    doc.spans[GOLD_KEY] = spans
    doc.ents = filter_spans(spans)


def convert_corpora(inputs: Sequence[PathLike], output: PathLike, lang: str = "en", skip_bad_lines: bool = False,
                    format: Optional[str] = None, labels: Optional[Collection[str]] = None,
                    id_map: Optional[Dict[str, str]] = None, strip_id_prefixes: Sequence[str] = ()) -> dict:
    """Convert ``inputs`` (each PubTator, BioC XML/JSON, Prodigy JSONL or .spacy; ``format`` for all of them, else by
    extension) into one ``.spacy`` file, documents in input order; returns the conversion statistics.

    Every input is read before anything is written: a malformed one stops with its location and writes
    nothing; with ``skip_bad_lines`` malformed lines / annotations are left out and counted. A document an
    earlier input had already (the same id) is refused too, or with ``skip_bad_lines`` left out and counted. With
    ``labels``, mentions of other types are left out and counted by type; with ``id_map`` (from
    :func:`.id_map.read_id_map`), gold ids of an older KB release become the current ones, after
    ``strip_id_prefixes`` are removed from them (``["UMLS:"]``).
    """
    if not inputs:
        raise files.InputError("no corpus to convert")
    formats = [corpus_format(p, format) for p in inputs]  # an unknown format fails before any reading
    nlp = spacy.blank(lang)
    stats = ConversionStats()
    bad = files.BadLines() if skip_bad_lines else None
    docs: List[Doc] = []
    earlier: Dict[str, str] = {}  # a document id → the input that had it first
    for path, fmt in zip(inputs, formats):
        docs.extend(corpus_docs(nlp, path, fmt, stats, bad, labels, id_map, tuple(strip_id_prefixes), earlier))
    if bad is not None:
        stats.skipped_lines, stats.skipped_examples = bad.count, list(bad.examples)
    if labels is not None and not stats.mentions and stats.left_out_by_label:
        found = ", ".join(f"{n} {t}" for t, n in sorted(stats.left_out_by_label.items()))
        raise files.InputError(f"no mention has a type in labels {sorted(labels)}; the corpora have {found}")
    write_docbin(docs, output)
    out = stats.as_dict()
    out["inputs"] = [str(p) for p in inputs]
    out["formats"] = formats
    return out
