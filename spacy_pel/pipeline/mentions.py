"""Where ``pel_linker``'s mentions come from: registered mention sources, chosen in the config.

* ``spacy_pel.mentions.ents.v1`` — ``doc.ents`` (from any NER, rules or gold annotations);
* ``spacy_pel.mentions.span_group.v1`` — ``doc.spans[spans_key]`` (overlapping spans allowed);
* ``spacy_pel.mentions.span_finder.v1`` — end to end: every span of ≤ ``max_span_len`` tokens (that
  cuts through no bracket pair) is scored by a trained span scorer over one transformer pass per document; spans with
  ``p > threshold`` are kept (greedy by score, no overlaps) and replace ``doc.ents``. ``model``: a
  folder from ``spacy_pel.train_e2e`` (its own fine-tuned transformer + ``span_scorer.safetensors``),
  so the linker's retriever links the found spans — or a list of such folders, whose probabilities are
  averaged (:mod:`.span_ensemble`); or ``scorer``: a scorer file over the linker's own
  transformer (``spacy_pel.train_spans``). A found span's label comes from the scorer's label head
  when it has one, else from its entity's KB types mapped to corpus labels (``labels``, or the map
  learned in training). ``threshold = null`` takes the γ recorded in the ``span_report.json``.
  ``propagate``: document-level consistency (:mod:`.propagation`: other occurrences of a found
  mention and defined short forms of found long forms become mentions too); ``lexicon``: the training
  corpus's surface forms, matched in the text where the span model gives them at least
  ``lexicon_floor`` (:mod:`.lexicon`); ``lexicon_extend``: such a match may also replace the found
  spans it holds (``male breast cancer`` for ``breast cancer``).

A source gives, per doc, the spans to link as ``(start, end, label)`` (:class:`Found`) and, when it
encoded the documents itself, their token vectors (so a collective vector strategy reuses that pass)
and the span model's probability of each span (the NIL evidence's ``span`` feature); it also says
where the linked spans are written back.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import srsly
import torch
from spacy.tokens import Doc, Span, SpanGroup
from spacy.util import registry

from ..corpora import gold_ids, gold_spans
from ..files import InputError
from ..models.doc_encoder import (
    MAX_SPAN_LEN,
    blank_tokens,
    bracket_balanced,
    encode_docs,
    enumerate_doc_spans,
    within_passages,
)
from ..models.encoder import BiEncoder
from ..models.span_scorer import (
    SCORER_FILE,
    SpanScorer,
    load_span_scorer,
    save_span_scorer,
    select_spans,
)
from ..retrieval.index import EntityIndex
from .config import LinkerPart, check_probability
from .lexicon import Lexicon, lexicon_extensions, lexicon_spans, make_lexicon, read_lexicon
from .propagation import propagate
from .span_ensemble import (
    Member,
    configured_models,
    load_member,
    mean_probs,
    model_sources,
    place_members,
    place_model,
    read_members,
    save_members,
)

SpanTuples = List[Tuple[int, int, int]]  # (start, end, label id) per span of one doc


class Found(NamedTuple):
    """What a mention source gives for a batch of docs: per doc its ``spans``; the docs' token vectors
    (``hidden``) when the source encoded them with the linker's own transformer, else None; per doc
    the span model's probability of each span (``probs``), None for spans the docs already had."""

    spans: List[SpanTuples]
    hidden: Optional[list] = None
    probs: Optional[List[List[float]]] = None

ENCODER_DIR = "span_encoder"  # the finder's own transformer inside a saved component
REPORT_FILE = "span_report.json"
LEXICON_FILE = "lexicon.json"  # the lexicon's source path and surface forms, saved with the component
DEFAULT_SPAN_THRESHOLD = 0.5  # when neither the config nor a span_report.json gives γ


def doc_spans(doc: Doc, spans_key: Optional[str] = None) -> Sequence[Span]:
    """The spans of ``doc`` for ``spans_key``: ``doc.ents`` for None, else ``doc.spans[spans_key]``
    (empty if the doc has no such group)."""
    if spans_key is None:
        return doc.ents
    return doc.spans[spans_key] if spans_key in doc.spans else []


def linked_gold(source, doc: Doc) -> Sequence[Span]:
    """The gold mentions of ``doc`` that a mention source links (a source with ``labels``: those of its labels,
    one linker per KB; a source without the setting: all of them)."""
    of_labels = getattr(source, "of_labels", None)
    return gold_spans(doc) if of_labels is None else of_labels(gold_spans(doc))


def spans_at(spans: Sequence[list], wanted) -> List[list]:
    """Per doc, the spans whose flat index (counted over all the docs' spans in order) is in ``wanted``."""
    wanted, out, start = set(wanted), [], 0
    for sp in spans:
        out.append([s for i, s in enumerate(sp, start) if i in wanted])
        start += len(sp)
    return out


def docs_per_pass(batch_size: int) -> int:
    """Documents per transformer batch in one-pass-per-document encoding."""
    return max(1, batch_size // 8)


class DocSpans:
    """Link the spans a doc already has: ``doc.ents`` or ``doc.spans[spans_key]`` — with ``labels``, only
    the spans of those labels (the others are left as they are: another linker, with another KB, can link
    them; each linker's candidates and confidence stay on its own spans)."""

    label_from_kb = False  # found spans (no label of their own) take their entity's type

    def __init__(self, spans_key: Optional[str] = None, labels: Optional[Sequence[str]] = None, name: str = "ents"):
        if spans_key is not None and (not isinstance(spans_key, str) or not spans_key):
            raise ValueError(f"spacy_pel.mentions.span_group.v1: `spans_key` must be a non-empty string, not {spans_key!r}")
        if labels is not None and (isinstance(labels, str) or not all(isinstance(x, str) and x for x in labels)):
            raise ValueError(f"spacy_pel.mentions.{name}.v1: `labels` must be a list of span labels, e.g. "
                             f"[\"Chemical\"], not {labels!r}")
        self.spans_key = spans_key
        self.labels = None if labels is None else frozenset(labels)

    def spans(self, doc: Doc) -> Sequence[Span]:
        return self.of_labels(doc_spans(doc, self.spans_key))

    def of_labels(self, spans: Sequence[Span]) -> Sequence[Span]:
        """The spans this source links: those of its ``labels``, or all of them."""
        return spans if self.labels is None else [s for s in spans if s.label_ in self.labels]

    def find(self, docs: Sequence[Doc], encoder: BiEncoder, batch_size: int) -> Found:
        return Found([[(s.start, s.end, s.label) for s in self.spans(d)] for d in docs])

    def write(self, doc: Doc, spans: List[Span]) -> bool:
        """Put the linked spans on the doc (in place of the spans they were made from, the others kept
        as they are when ``labels`` leaves some out; the spans' ``id`` and the group's ``attrs`` kept);
        False if there was nothing to write."""
        if not spans:
            return False
        held = doc_spans(doc, self.spans_key)
        mine = self.of_labels(held)
        if [(s.start, s.end) for s in mine] == [(s.start, s.end) for s in spans]:  # made from these: keep their ids
            spans = [Span(doc, s.start, s.end, label=s.label, kb_id=s.kb_id, span_id=o.id) for s, o in zip(spans, mine)]
        if self.labels is not None:
            linked = iter(spans)
            spans = [next(linked) if s.label_ in self.labels else s for s in held]
        if self.spans_key is None:
            doc.ents = spans  # fresh Span objects: kb_id_ set on doc.ents' copies would not stick
        else:
            attrs = dict(held.attrs) if isinstance(held, SpanGroup) else {}
            doc.spans[self.spans_key] = SpanGroup(doc, name=self.spans_key, attrs=attrs, spans=spans)
        return True


class SpanFinder(DocSpans, LinkerPart):
    """End-to-end mentions from a trained span scorer (see the module doc)."""

    label_from_kb = True
    data_name = "span_scorer"

    def __init__(self, scorer: Optional[str], threshold: Optional[float] = None, max_span_len: int = MAX_SPAN_LEN,
                 labels: Optional[Dict[str, str]] = None, model: Union[str, List[str], None] = None, propagate: bool = False,
                 propagate_floor: float = 0.0, lexicon: Optional[str] = None, lexicon_floor: float = 0.1,
                 lexicon_extend: bool = False):
        super().__init__(None)
        if not isinstance(lexicon_extend, bool):
            raise ValueError(f"spacy_pel.mentions.span_finder.v1: `lexicon_extend` must be true or false, not {lexicon_extend!r}")
        self.lexicon_extend = lexicon_extend
        if lexicon is not None and not isinstance(lexicon, (str, Path)):
            raise ValueError(f"spacy_pel.mentions.span_finder.v1: `lexicon` must be a path or null, not {lexicon!r}")
        self.lexicon_source = str(lexicon) if lexicon else None
        self.lexicon: Optional[Lexicon] = None
        self.lexicon_floor = check_probability(lexicon_floor, "span_finder.lexicon_floor")
        if self.lexicon_floor is None:
            raise ValueError("spacy_pel.mentions.span_finder.v1: `lexicon_floor` must be a probability in [0, 1], not null")
        if not isinstance(propagate, bool):
            raise ValueError(f"spacy_pel.mentions.span_finder.v1: `propagate` must be true or false, not {propagate!r}")
        self.propagate = propagate
        self.propagate_floor = check_probability(propagate_floor, "span_finder.propagate_floor")
        if self.propagate_floor is None:
            raise ValueError("spacy_pel.mentions.span_finder.v1: `propagate_floor` must be a probability in [0, 1], not null")
        if not scorer and not model:
            raise ValueError(
                "spacy_pel.mentions.span_finder.v1 needs `model` (a folder from `python -m spacy_pel.train_e2e`: "
                "its own transformer and span_scorer.safetensors) or `scorer` (a span scorer file over the linker's "
                "transformer, from `python -m spacy_pel.train_spans`)"
            )
        if not isinstance(max_span_len, int) or isinstance(max_span_len, bool) or max_span_len < 1:
            raise ValueError(f"spacy_pel.mentions.span_finder.v1: `max_span_len` must be an integer ≥ 1, not {max_span_len!r}")
        if labels is not None and not (isinstance(labels, dict) and all(isinstance(v, str) for v in labels.values())):
            raise ValueError(f"spacy_pel.mentions.span_finder.v1: `labels` must map KB types to labels, not {labels!r}")
        self.model_config = configured_models(model)  # as the config says: folders, or train_e2e outputs listing theirs
        models = model_sources(self.model_config)
        self.model_source = models[0] if models else None
        self.member_sources = models[1:]  # further span models, averaged with the first
        self.members: List[Member] = []
        self.scorer_file = str(scorer) if scorer else str(Path(models[0]) / SCORER_FILE)  # read by setup
        # what the saved pipeline is matched on: the config's own path (a folder listing several models
        # stands for them even where it does not exist any more)
        self.source = str(scorer) if scorer else str(Path(self.model_config[0]) / SCORER_FILE)
        self.configured_threshold = check_probability(threshold, "span_finder.threshold")
        self.configured_labels = dict(labels) if labels is not None else None
        self.max_span_len = max_span_len
        self.scorer: Optional[SpanScorer] = None
        self.encoder: Optional[BiEncoder] = None  # the finder's own transformer (with `model`), else the linker's
        self.report_threshold: Optional[float] = None  # γ of the span_report.json beside the scorer
        self.report_labels: Optional[Dict[str, str]] = None  # its KB type → corpus label map

    @property
    def threshold(self) -> float:
        """γ in use: the config's, else the scorer's report's, else 0.5."""
        if self.configured_threshold is not None:
            return self.configured_threshold
        return DEFAULT_SPAN_THRESHOLD if self.report_threshold is None else self.report_threshold

    def label_for(self, types: Sequence[str]) -> str:
        """A found span's label: its entity's first KB type that the label map knows (the config's
        ``labels``, else the map learned in training, in the scorer's report), else its first type."""
        labels = self.configured_labels if self.configured_labels is not None else self.report_labels or {}
        return next((labels[t] for t in types if t in labels), types[0] if types else "ENTITY")

    def _read_report(self, scorer_file: Path) -> None:
        report = scorer_file.parent / REPORT_FILE
        data = srsly.read_json(report) if report.exists() else {}
        self.report_threshold = float(data["threshold"]) if "threshold" in data else None
        self.report_labels = data.get("labels")

    def setup(self, encoder: BiEncoder, index: EntityIndex) -> None:
        if self.lexicon is None and self.lexicon_source:
            self.lexicon = read_lexicon(self.lexicon_source)
        report = Path(self.scorer_file).parent / REPORT_FILE  # a train_e2e model is whole with it (γ, labels)
        if self.model_source and self.configured_threshold is None and self.scorer is None and not report.exists():
            raise InputError(f"span model {self.model_source} has no {REPORT_FILE} (γ, label map): an unfinished "
                             "train-e2e run? Run it again to finish it, or give the span finder a `threshold`")
        if self.scorer is None:
            self.scorer = load_span_scorer(self.scorer_file, device=str(encoder.device_))
            self._read_report(Path(self.scorer_file))
        if self.model_source and self.encoder is None:
            self.encoder = BiEncoder.from_pretrained(self.model_source)
        place_model(self.encoder, self.scorer, encoder, self.scorer_file)  # runs as the linker's encoder does
        if self.member_sources and not self.members:
            self.members = [load_member(source) for source in self.member_sources]
        place_members(self.members, encoder, self.member_sources)

    def to_disk(self, path: Path) -> bool:
        if self.scorer is None:
            return False
        save_span_scorer(self.scorer, path / SCORER_FILE)
        if self.encoder is not None:
            self.encoder.save(path / ENCODER_DIR)
        report = {"threshold": self.report_threshold, "labels": self.report_labels}
        if any(v is not None for v in report.values()):
            srsly.write_json(path / REPORT_FILE, {k: v for k, v in report.items() if v is not None})
        if self.lexicon is not None:
            srsly.write_json(path / LEXICON_FILE, {"source": self.lexicon_source, "forms": sorted(self.lexicon.forms)})
        save_members(self.members, self.model_config, self.member_sources, path)
        return True

    def from_disk(self, path: Path) -> bool:
        if not (path / SCORER_FILE).exists():
            return False
        self.scorer = load_span_scorer(path / SCORER_FILE)
        self._read_report(path / SCORER_FILE)
        saved = srsly.read_json(path / LEXICON_FILE) if (path / LEXICON_FILE).exists() else {}
        if self.lexicon_source and isinstance(saved, dict) and saved.get("source") == self.lexicon_source:  # else: the config's file (or null: off)
            self.lexicon = make_lexicon(saved["forms"])
        if (path / ENCODER_DIR).exists():
            self.encoder = BiEncoder.from_pretrained(path / ENCODER_DIR)
        saved = read_members(path, self.model_config, self.member_sources)
        if saved is not None:  # its folders need not exist any more
            self.member_sources, self.members = saved
        return True

    def find(self, docs: Sequence[Doc], encoder: BiEncoder, batch_size: int) -> Found:
        """Score every span of ≤ ``max_span_len`` tokens from one pass per document; keep those above
        the threshold (greedy by score, no overlaps). Returns (:class:`Found`) the spans (labelled by
        the label head, if the scorer has one; else label 0), the documents' token vectors when they
        come from the linker's encoder (None when the finder has its own transformer) and the span
        model's probability of each span (those propagation or the lexicon added included)."""
        if self.scorer is None:
            raise ValueError("the span finder has no span scorer loaded yet (the linker sets it up with its encoder)")
        hidden = encode_docs(self.encoder or encoder, docs, batch_size=docs_per_pass(batch_size), pooling=self.scorer.pooling)
        others = [encode_docs(e, docs, batch_size=docs_per_pass(batch_size), pooling=s.pooling) for e, s in self.members]
        spans: List[SpanTuples] = []
        span_probs: List[List[float]] = []
        with torch.inference_mode():
            for k, (doc, H) in enumerate(zip(docs, hidden)):
                starts, ends = enumerate_doc_spans(doc, self.max_span_len, blank=blank_tokens(H))  # no BOM, ZWSP … edge
                # no `HBV) infection`, nor a span from a PubTator title into its abstract
                keep = bracket_balanced(doc, starts, ends) & within_passages(doc, starts, ends)
                starts, ends = starts[keep], ends[keep]
                if len(starts) == 0:
                    spans.append([])
                    span_probs.append([])
                    continue
                probs = self.scorer.probs(H, starts, ends).detach().float().cpu().numpy()  # once: selection and propagation
                probs = mean_probs(probs, self.members, others, k, starts, ends)
                chosen = np.asarray(select_spans(starts, ends, probs, self.threshold), dtype=np.int64)
                labels = [0] * len(chosen)
                if self.scorer.labels and len(chosen):
                    labels = [doc.vocab.strings.add(x) for x in self.scorer.predict_labels(H, starts[chosen], ends[chosen])]
                kept = [(int(starts[i]), int(ends[i]), label) for i, label in zip(chosen, labels)]
                floored = self.propagate and self.propagate_floor
                support = self._probability(starts, ends, probs)  # one map a doc
                if self.propagate:  # no floor: every occurrence, so no support
                    kept = propagate(doc, kept, support if floored else None, self.propagate_floor)
                if self.lexicon:
                    kept = self._add_lexicon(doc, H, kept, support)
                if self.propagate or self.lexicon:  # an occurrence they add may cross a passage start too
                    inside = within_passages(doc, [a for a, _, _ in kept], [b for _, b, _ in kept])
                    kept = [k for k, ok in zip(kept, inside) if ok]
                spans.append(kept)
                span_probs.append([support(a, b) for a, b, _ in kept])
        return Found(spans, None if self.encoder is not None else hidden, span_probs)

    @staticmethod
    def _probability(starts: np.ndarray, ends: np.ndarray, probs: np.ndarray) -> Callable[[int, int], float]:
        """The span model's probability of an enumerated span (0 for one longer than ``max_span_len``)."""
        where = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(starts, ends))}
        return lambda a, b: float(probs[where[(a, b)]]) if (a, b) in where else 0.0

    def _add_lexicon(self, doc: Doc, H: torch.Tensor, kept: SpanTuples, support: Callable[[int, int], float]) -> SpanTuples:
        """``kept`` plus the lexicon's matches (:func:`.lexicon.lexicon_spans`) — with ``lexicon_extend``,
        first the matches that replace the found spans they hold (:func:`.lexicon.lexicon_extensions`) —,
        labelled by the label head."""
        extra = []
        if self.lexicon_extend:
            extra = lexicon_extensions(doc, kept, self.lexicon, self.max_span_len, support, self.lexicon_floor)
            kept = [k for k in kept if not any(a <= k[0] and k[1] <= b for a, b in extra)]
        taken = kept + [(a, b, 0) for a, b in extra]
        extra += lexicon_spans(doc, taken, self.lexicon, self.max_span_len, support, self.lexicon_floor)
        if not extra:
            return kept
        labels = [0] * len(extra)
        if self.scorer.labels:
            a, b = np.asarray([x for x, _ in extra], np.int64), np.asarray([y for _, y in extra], np.int64)
            labels = [doc.vocab.strings.add(x) for x in self.scorer.predict_labels(H, a, b)]
        return sorted([*kept, *((x, y, label) for (x, y), label in zip(extra, labels))])

    def write(self, doc: Doc, spans: List[Span]) -> bool:
        if not spans and not len(doc.ents):
            return False
        doc.ents = spans  # the found spans replace whatever the doc had
        return True


def learn_labels(docs: Sequence[Doc], index: EntityIndex) -> Dict[str, str]:
    """KB type → the label most gold mentions of entities of that type carry in ``docs`` (gold spans
    whose id the KB knows): how found spans get the corpus's labels (Chemical, Disease), not KB types."""
    counts: Dict[str, Counter] = defaultdict(Counter)
    for doc in docs:
        for span in gold_spans(doc):
            for row in {index.resolve(i) for i in gold_ids(span.kb_id_)} - {None}:
                for kb_type in index.entities.types[row]:
                    counts[kb_type][span.label_] += 1
    return {kb_type: c.most_common(1)[0][0] for kb_type, c in sorted(counts.items())}


@registry.misc("spacy_pel.mentions.ents.v1")
def ents_mentions(labels: Optional[List[str]] = None) -> DocSpans:
    """Link ``doc.ents`` (with ``labels``: those of these labels only; e.g. one linker per KB)."""
    return DocSpans(None, labels, "ents")


@registry.misc("spacy_pel.mentions.span_group.v1")
def span_group_mentions(spans_key: str, labels: Optional[List[str]] = None) -> DocSpans:
    """Link ``doc.spans[spans_key]`` (overlapping spans allowed; with ``labels``, those of these labels
    only); results go back to the same group."""
    return DocSpans(spans_key, labels, "span_group")


@registry.misc("spacy_pel.mentions.span_finder.v1")
def span_finder_mentions(scorer: Optional[str] = None, threshold: Optional[float] = None, max_span_len: int = MAX_SPAN_LEN,
                         labels: Optional[Dict[str, str]] = None, model: Union[str, List[str], None] = None,
                         propagate: bool = False, propagate_floor: float = 0.0, lexicon: Optional[str] = None,
                         lexicon_floor: float = 0.1, lexicon_extend: bool = False) -> SpanFinder:
    """Find the mentions with a trained span model (end to end, no NER needed): ``model`` a
    ``train_e2e`` folder (own transformer + scorer; a list of them: their probabilities averaged, γ and
    labels from the first) or ``scorer`` a scorer file over the linker's
    transformer; ``labels``: KB type → span label for scorers without a label head (null: the map
    learned with the scorer, from the training corpus's labels); ``propagate``: document-level
    consistency of the found spans; ``propagate_floor``: the least probability the span model must give
    a propagated occurrence (0: every occurrence); ``lexicon``: an aliases JSON file of the training
    corpus's surface forms (null: off), matched in the text where the span model gives a match at least
    ``lexicon_floor``; ``lexicon_extend``: a match may also replace the found spans it holds."""
    return SpanFinder(scorer, threshold, max_span_len, labels, model, propagate, propagate_floor, lexicon, lexicon_floor,
                      lexicon_extend)
