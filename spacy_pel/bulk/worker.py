"""The actor of a bulk run: it loads the saved pipeline once and links chunk after chunk.

Given spans (PubTator) are set as :mod:`spacy_pel.corpora` sets them (tokens split at every mention
boundary) and linked as :class:`~spacy_pel.pipeline.given_mentions.GivenMentions` links them: every
given mention, overlapping ones and repeats included, the pipeline's own mention finders left out; in a
pipeline with a component after its last linker that reads or sets the entities (``pel_discovery``)
only ``doc.ents``, and the overlapping mentions left out are counted in the worker's
``stats.overlapping``. A mention whose boundary falls inside white space cannot be a span: it is
counted in ``stats.unaligned`` (with examples), not linked; one of a label no linker links (a Gene mention
given to a pipeline of chemical and disease linkers) is counted by label in ``stats.left_out_by_label``. Raw text goes through the whole pipeline
(a PubTator title and abstract as two passages: no found mention crosses from one into the other). A pipeline whose
linkers all find their own spans (a span finder) does not use given spans: such a document is built and linked as
raw text (its tokens not split at the given boundaries, which would leak them into what is found).

A batch that raises is not lost: each of its documents is linked again alone, twice at most, and a
document that fails both times comes back with ``error`` set (its id and the reason), while the others
come back linked. Each output item is one document: its mention rows as JSON, counts and any error.
"""
from __future__ import annotations

import json
import logging
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from spacy.language import Language
from spacy.tokens import Doc

from ..corpora import GOLD_KEY, UNALIGNED_EXAMPLES, Annotation, ConversionStats, PubTatorDoc, make_doc, set_title_length
from ..pipeline.given_mentions import GivenMentions, reads_doc_spans, reads_given, spans_written
from ..pipeline.linker import load_pipeline
from ..pipeline.span_data import CANDIDATES_ATTR, CONFIDENCE_ATTR
from .shards import NO_TITLE

log = logging.getLogger(__name__)
ATTEMPTS_ALONE = 2


def mention_rows(doc: Doc, doc_id: str, sources: Sequence[object]) -> List[dict]:
    """The output rows of a linked doc, one per mention the pipeline's linkers wrote to their mention
    ``sources`` (:func:`~spacy_pel.pipeline.given_mentions.spans_written`), in document order."""
    rows = []
    for span in spans_written(doc, sources):
        candidates = span._.get(CANDIDATES_ATTR) or []
        rows.append({
            "doc_id": doc_id, "start_char": span.start_char, "end_char": span.end_char, "text": span.text,
            "label": span.label_, "kb_id": span.kb_id_, "score": float(candidates[0][2]) if candidates else None,
            "confidence": None if span._.get(CONFIDENCE_ATTR) is None else float(span._.get(CONFIDENCE_ATTR)),
            "candidates": [{"id": c[0], "name": c[1], "score": float(c[2])} for c in candidates],
        })
    return rows


def linked_labels(sources: Sequence[object]) -> Optional[frozenset]:
    """The labels of given mentions the linkers' mention ``sources`` link, or None when one links every label
    (no ``labels``) or is of another kind (a span finder finds its own spans)."""
    labels: set = set()
    for source in sources:
        if not reads_doc_spans(source) or source.labels is None:
            return None
        labels.update(source.labels)
    return frozenset(labels)


def count_other_labels(doc: Doc, labels: Optional[frozenset], stats: ConversionStats) -> None:
    """Count in ``stats.left_out_by_label`` the given mentions of ``doc`` (those that are spans) whose label
    no linker links: they are in no output."""
    if labels is None:
        return
    for span in doc.spans.get(GOLD_KEY, []):
        if span.label_ not in labels:
            stats.left_out_by_label[span.label_] = stats.left_out_by_label.get(span.label_, 0) + 1


def build_doc(nlp: Language, item: dict, stats: Optional[ConversionStats] = None, given: bool = True) -> Doc:
    """The doc of a dataset item: raw text, or (``given``) its given spans set as the span group ``pel_gold`` (the
    non-overlapping ones as ``doc.ents`` too; mentions that cannot be spans are counted in ``stats``); with a title
    (``title_length`` ≥ 0), either way, the abstract's start as a passage start, which no found mention crosses."""
    text = item["text"]
    title = item.get("title_length", NO_TITLE)
    title = title if title >= 0 else None
    if item["spans"] and given:
        annotations = [Annotation(a, b, text[a:b], label, ["NIL"]) for a, b, label in json.loads(item["spans"])]
        return make_doc(nlp, PubTatorDoc(item["doc_id"], text, annotations, title_length=title), stats)
    return set_title_length(nlp.make_doc(text), title)


def _failure(err: BaseException) -> str:
    where = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    at = f" (at {Path(where.filename).name}:{where.lineno})" if where else ""
    return f"{type(err).__name__}: {err}{at}"


class LinkWorker:
    """``map_batches`` callable class: one per actor, holding one loaded pipeline.

    ``setup(nlp)``, when given, runs once after loading (register a component, wrap a method — the
    tests use it to plant a poisoned document).
    """

    def __init__(self, pipeline: str, threads: int = 1, batch_size: int = 64, setup: Optional[Callable] = None):
        torch.set_num_threads(max(1, threads))
        started = time.perf_counter()
        self.nlp, _ = load_pipeline(pipeline)  # refuses a pipeline without a pel_linker
        if setup is not None:
            setup(self.nlp)
        self.batch_size = batch_size
        self.given = GivenMentions(self.nlp)
        self.linkers = self.given.linkers
        self.nil_labels = frozenset(linker.cfg.nil_label for linker in self.linkers)
        self.labels = linked_labels(self.given.sources)  # None: every label's given mentions are linked
        self.uses_given = reads_given(self.given.sources)  # False: span finders only, given spans linked as raw text
        # given mentions not linked (``unaligned``, ``overlapping``, ``left_out_by_label``), over every call
        self.stats = ConversionStats()
        self.load_seconds = time.perf_counter() - started

    def link(self, items: Sequence[dict]) -> List[List[dict]]:
        """Mention rows of each item (all with given spans or all raw: one call of ``nlp.pipe``); the given
        mentions not linked are added to ``stats``."""
        results = self._link(items)
        for _, counts in results:
            self.stats.unaligned += counts.unaligned
            self.stats.overlapping += counts.overlapping
            self.stats.unaligned_examples.extend(counts.unaligned_examples[:max(0, UNALIGNED_EXAMPLES - len(self.stats.unaligned_examples))])
            for label, n in counts.left_out_by_label.items():
                self.stats.left_out_by_label[label] = self.stats.left_out_by_label.get(label, 0) + n
        return [rows for rows, _ in results]

    def _link(self, items: Sequence[dict]) -> List[Tuple[List[dict], ConversionStats]]:
        """Mention rows of each item, and its given mentions not linked: ``unaligned`` (with examples) and
        ``overlapping`` (0 when overlapping mentions are linked through ``pel_gold``) and, by label, those of a
        label no linker links (``left_out_by_label``). Items with given spans that no linker reads are raw text."""
        if not items[0]["spans"] or not self.uses_given:
            docs = self.nlp.pipe([build_doc(self.nlp, item, given=False) for item in items], batch_size=self.batch_size)
            own = [linker.mentions for linker in self.linkers]
            return [(mention_rows(doc, item["doc_id"], own), ConversionStats()) for doc, item in zip(docs, items)]
        counts = [ConversionStats() for _ in items]
        docs = [build_doc(self.nlp, item, c) for item, c in zip(items, counts)]
        for doc, c in zip(docs, counts):
            count_other_labels(doc, self.labels, c)
        linked = self.given.pipe(docs, self.batch_size)
        if self.given.links_overlaps:  # else doc.ents only: the overlapping mentions left out stay counted
            for c in counts:
                c.overlapping = 0
        return [(mention_rows(doc, item["doc_id"], self.given.sources), c)
                for doc, item, c in zip(linked, items, counts)]

    def _link_each(self, items: Sequence[dict]) -> Dict[int, object]:
        """{position: (rows, not linked) or error}: the documents of a failed batch, alone, ``ATTEMPTS_ALONE`` times."""
        out: Dict[int, object] = {}
        for i, item in enumerate(items):
            for attempt in range(ATTEMPTS_ALONE):
                try:
                    out[i] = self._link([item])[0]
                    break
                except Exception as err:  # noqa: BLE001 — any failure of one document is reported, not raised
                    out[i] = f"failed {attempt + 1} times alone after its batch failed; last: {_failure(err)}"
        return out

    def __call__(self, batch) -> dict:
        items = batch.to_pylist()
        started = time.perf_counter()
        results: Dict[int, object] = {i: item["error"] for i, item in enumerate(items) if item["error"]}
        todo = [i for i in range(len(items)) if i not in results]
        for given in (True, False):  # a chunk is one shard's, so in practice one group is empty
            group = [i for i in todo if bool(items[i]["spans"]) == given]
            if not group:
                continue
            try:
                results.update(zip(group, self._link([items[i] for i in group])))
            except Exception:  # noqa: BLE001 — retried document by document below
                results.update({group[i]: r for i, r in self._link_each([items[i] for i in group]).items()})
        seconds = time.perf_counter() - started
        out = {k: [] for k in ("shard", "seq", "doc_id", "rows", "mentions", "nil", "error", "seconds", "unaligned",
                               "unaligned_examples", "overlapping_not_linked", "not_linked_by_label")}
        for i, item in enumerate(items):
            result = results[i]
            rows, counts = result if isinstance(result, tuple) else ([], ConversionStats())
            out["shard"].append(item["shard"])
            out["seq"].append(item["seq"])
            out["doc_id"].append(item["doc_id"])
            out["rows"].append(json.dumps(rows, ensure_ascii=False))
            out["mentions"].append(len(rows))
            out["nil"].append(sum(r["kb_id"] in self.nil_labels for r in rows))
            out["error"].append("" if isinstance(result, tuple) else str(result))
            out["seconds"].append(seconds / len(items))
            out["unaligned"].append(counts.unaligned)
            out["unaligned_examples"].append(json.dumps(counts.unaligned_examples, ensure_ascii=False))
            out["overlapping_not_linked"].append(counts.overlapping)
            out["not_linked_by_label"].append(json.dumps(counts.left_out_by_label, ensure_ascii=False))
        return out
