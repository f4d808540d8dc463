"""Dev-set evaluators for model selection during training, in the style of sentence-transformers.

An evaluator is called with the model being trained and returns a dict of metrics; its
``primary_metric`` (a dotted path into that dict) is what the training loop maximises when it picks
``DIR/best``, and :meth:`Evaluator.log` is what a training history keeps.

* :class:`RecallEvaluator` -- recall@1 of dev mentions against the KB (the retriever);
* :class:`JointEvaluator` -- strict end-to-end F1 (span + id) of a mention transformer with a span
  scorer (the joint end-to-end model), and the span threshold γ with the best span F1;
* :class:`SpanEvaluator` -- strict span F1 of a span scorer over frozen token vectors, at the best
  threshold of a grid.

This package is below :mod:`spacy_pel.training`: it imports nothing from it.
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

import numpy as np
import torch

from ..corpora import NIL, gold_ids, gold_spans
from ..models.doc_encoder import align_wordpieces, encode_docs, enumerate_doc_spans, span_link_vectors
from ..models.encoder import BiEncoder
from ..models.span_scorer import SpanScorer, bio_tags, select_spans
from ..retrieval.index import EntityIndex
from .metrics import prf

Metrics = Dict[str, Any]
MAX_LINKED = 200  # per dev doc, most probable spans linked during evaluation (an unlinked kept span counts as wrong)
THRESHOLDS = [0.05, *np.round(np.arange(0.1, 0.95, 0.05), 2).tolist()]  # γ grid of the joint model
SPAN_THRESHOLDS = [0.02, 0.05, *np.arange(0.1, 0.95, 0.05)]  # γ grid of the frozen-vector span scorer


class Evaluator:
    """Base class: ``evaluator(model) -> metrics``; ``primary(metrics)`` is the value to maximise."""

    primary_metric: str = ""

    def __call__(self, model) -> Metrics:
        raise NotImplementedError

    def primary(self, metrics: Metrics) -> float:
        value: Any = metrics
        for key in self.primary_metric.split("."):
            value = value[key]
        return float(value)

    def log(self, metrics: Metrics) -> Metrics:
        """What a training history keeps of ``metrics`` (top-level numbers rounded to 4 places)."""
        return {k: round(float(v), 4) if isinstance(v, (int, float)) else v for k, v in metrics.items()}


# ------------------------------------------------------------------ retriever
class RecallEvaluator(Evaluator):
    """Recall@1 of dev mentions (encoder ``inputs`` and gold KB rows) against ``index``.

    With ``reencode_entities`` (a trained entity tower) the KB's stored vectors are stale: the dev
    mentions' gold entities plus ``kb_sample`` random KB entities (drawn with ``seed``, the same
    each time) are encoded again and searched instead.
    """

    primary_metric = "dev_r1"

    def __init__(self, inputs: Sequence, gold: Sequence[Set[int]], index: EntityIndex, reencode_entities: bool = False,
                 kb_sample: int = 0, seed: int = 0, batch_size: int = 64):
        if len(inputs) != len(gold):
            raise ValueError(f"{len(inputs)} mention inputs but {len(gold)} gold sets")
        self.inputs, self.gold, self.index = inputs, gold, index
        self.reencode_entities, self.kb_sample, self.seed, self.batch_size = reencode_entities, kb_sample, seed, batch_size

    def __call__(self, encoder: BiEncoder) -> Metrics:
        if not len(self.gold):
            return {"dev_r1": float("nan")}
        lengths = [len(s) for s, _ in self.inputs]
        mentions = encoder._encode(self.inputs, lengths, encoder.embed_mentions, self.batch_size, "dev", False)
        if self.reencode_entities:
            n = len(self.index)
            extra = np.random.default_rng(self.seed).choice(n, min(n, self.kb_sample), replace=False)
            rows = np.array(sorted(set().union(*self.gold) | set(extra.tolist())))
            entities = [self.index.entities[i] for i in rows]
            index = EntityIndex(entities, encoder.encode_entities(entities), metric=encoder.config.similarity,
                                fingerprint="", kind="flat")
            pred = rows[index.search(mentions, 1)[1][:, 0]]
        else:
            pred = self.index.search(mentions, 1)[1][:, 0]
        return {"dev_r1": float(np.mean([p in g for p, g in zip(pred, self.gold)]))}


# ------------------------------------------------------------------ joint end-to-end model
class DocExample:
    """A document's enumerated spans (≤ ``max_len`` tokens), their 0/1 labels (gold or not), its
    gold spans with their ids, and the gold spans whose ids are in the KB with their KB rows."""

    def __init__(self, doc, index: EntityIndex, max_len: int, tokenizer=None):
        """``tokenizer``: the encoder's; its tokens without word pieces (a BOM, a zero-width space) then edge no
        span, as in the span finder, which sees them as zero vectors."""
        self.doc = doc
        blank = None
        if tokenizer is not None:
            pieces = align_wordpieces(tokenizer, doc)[1]
            blank = pieces[:, 0] == pieces[:, 1]
        self.starts, self.ends = enumerate_doc_spans(doc, max_len, skip_punct=False, blank=blank)
        self.where = {(int(s), int(e)): i for i, (s, e) in enumerate(zip(self.starts, self.ends))}
        self.labels = np.zeros(len(self.starts), np.float32)
        self.linked: List[Tuple[int, int, Set[int]]] = []  # (start, end, gold rows) of in-KB gold spans
        self.gold: List[Tuple[int, int, Set[str]]] = []  # every gold span with its (primary) ids, for scoring
        self.span_labels: List[Tuple[int, str]] = []  # (enumerated span index, gold label) of the gold spans
        spans = gold_spans(doc)
        for span in spans:
            i = self.where.get((span.start, span.end))
            if i is not None:
                self.labels[i] = 1.0
                if span.label_:
                    self.span_labels.append((i, span.label_))
            ids = gold_ids(span.kb_id_)
            self.gold.append((span.start, span.end, {index.canonical(x) for x in ids}))  # alternative ids as their entity
            lookup = index.lookup
            rows = {lookup[x] for x in ids if x in lookup}
            if ids != [NIL] and rows:
                self.linked.append((span.start, span.end, rows))
        self.tags = bio_tags(len(doc), [(s.start, s.end) for s in spans])  # for a "bio" scorer


class EndToEndModel(NamedTuple):
    """What :class:`JointEvaluator` evaluates: a bi-encoder and a span scorer over its mention model."""

    encoder: BiEncoder
    scorer: SpanScorer


class JointEvaluator(Evaluator):
    """Strict end-to-end F1 (exact span and id) at span threshold ``threshold`` on ``docs``, with
    strict span F1 and the recall@1 of the gold spans; :meth:`choose_threshold` picks γ."""

    primary_metric = "strict.f"

    def __init__(self, docs: Sequence[DocExample], index: EntityIndex, threshold: float = 0.5,
                 thresholds: Sequence[float] = THRESHOLDS, max_linked: int = MAX_LINKED, primary_metric: str = "strict.f"):
        self.docs, self.index, self.threshold = list(docs), index, threshold
        self.primary_metric = primary_metric  # "span.f" when the model is chosen for its spans
        self.thresholds, self.max_linked = list(thresholds), max_linked

    def predictions(self, model: EndToEndModel) -> List[dict]:
        """Per doc: span probabilities and each span's top KB row (-1: not linked)."""
        out = []
        hidden = encode_docs(model.encoder, [d.doc for d in self.docs], pooling=model.scorer.pooling)
        with torch.no_grad():
            for ex, H in zip(self.docs, hidden):
                if not len(ex.starts):
                    out.append({"probs": np.zeros(0), "rows": np.zeros(0, np.int64)})
                    continue
                probs = model.scorer.probs(H, ex.starts, ex.ends).cpu().numpy()
                # only spans that some threshold could keep, and the gold spans, are linked
                gold = [ex.where[(s, e)] for s, e, _ in ex.gold if (s, e) in ex.where]
                likely = np.flatnonzero(probs > min(self.thresholds))
                likely = likely[np.argsort(-probs[likely], kind="stable")[: self.max_linked]]
                linked = np.union1d(likely, np.asarray(gold, np.int64))
                rows = np.full(len(probs), -1, np.int64)
                if len(linked):
                    vecs = span_link_vectors(model.encoder, H, ex.starts[linked], ex.ends[linked]).cpu().numpy()
                    rows[linked] = self.index.search(vecs, 1)[1][:, 0]
                out.append({"probs": probs, "rows": rows})
        return out

    def scores(self, preds: List[dict], threshold: float) -> Metrics:
        """Strict span F1, strict end-to-end F1 (span + id) and gold-span recall@1 at ``threshold``."""
        span_tp = link_tp = n_pred = n_gold = hits = n_linked = 0
        for ex, pr in zip(self.docs, preds):
            gold = {(s, e): ids for s, e, ids in ex.gold}
            chosen = select_spans(ex.starts, ex.ends, pr["probs"], threshold)
            n_pred, n_gold = n_pred + len(chosen), n_gold + len(gold)
            for i in chosen:
                ids = gold.get((int(ex.starts[i]), int(ex.ends[i])))
                if ids is not None:
                    span_tp += 1
                    link_tp += int(pr["rows"][i] >= 0 and self.index.entities.ids[int(pr["rows"][i])] in ids)
            for s, e, rows in ex.linked:
                i = ex.where.get((s, e))
                n_linked += 1
                hits += int(i is not None and int(pr["rows"][i]) in rows)
        return {"threshold": threshold, "span": prf(span_tp, n_pred, n_gold), "strict": prf(link_tp, n_pred, n_gold),
                "gold_span_R@1": round(hits / max(n_linked, 1), 4)}

    def __call__(self, model: EndToEndModel) -> Metrics:
        if not self.docs:  # nothing to evaluate on: the same metrics, NaN (the loop keeps the latest model)
            nan = {"p": float("nan"), "r": float("nan"), "f": float("nan")}
            return {"threshold": self.threshold, "span": dict(nan), "strict": dict(nan), "gold_span_R@1": float("nan")}
        return self.scores(self.predictions(model), self.threshold)

    def choose_threshold(self, model: EndToEndModel) -> Metrics:
        """The scores at the threshold of the grid with the best strict span F1 (the first, on ties)."""
        preds = self.predictions(model)
        return max((self.scores(preds, t) for t in self.thresholds), key=lambda r: r["span"]["f"])

    def log(self, metrics: Metrics) -> Metrics:
        return {"dev": metrics}


# ------------------------------------------------------------------ span scorer on frozen vectors
class SpanExample(NamedTuple):
    """A document's token vectors ``H`` ``[T, h]``, enumerated spans and their 0/1 gold labels."""

    H: torch.Tensor
    starts: np.ndarray
    ends: np.ndarray
    labels: np.ndarray


def detect(scorer: SpanScorer, H: torch.Tensor, starts, ends, threshold: float) -> List[Tuple[int, int]]:
    """Kept spans: probability above ``threshold``, overlaps resolved greedily by score."""
    if len(starts) == 0:
        return []
    with torch.no_grad():
        probs = scorer.probs(H, starts, ends).cpu().numpy()
    return [(int(starts[i]), int(ends[i])) for i in select_spans(starts, ends, probs, threshold)]


class SpanEvaluator(Evaluator):
    """Strict span P/R/F1 of a span scorer on ``examples``, at the threshold of ``thresholds`` with
    the best F1 (the first, on ties): ``{"threshold": γ, "span": {"p", "r", "f"}}``."""

    primary_metric = "span.f"

    def __init__(self, examples: Sequence[SpanExample], thresholds: Optional[Sequence[float]] = None):
        self.examples = list(examples)
        self.thresholds = list(SPAN_THRESHOLDS if thresholds is None else thresholds)

    def at(self, scorer: SpanScorer, threshold: float) -> Dict[str, float]:
        tp = n_pred = n_gold = 0
        for H, starts, ends, labels in self.examples:
            pred = set(detect(scorer, H, starts, ends, threshold))
            gold = {(int(s), int(e)) for s, e, y in zip(starts, ends, labels) if y}
            tp, n_pred, n_gold = tp + len(pred & gold), n_pred + len(pred), n_gold + len(gold)
        return prf(tp, n_pred, n_gold)

    def __call__(self, scorer: SpanScorer) -> Metrics:
        t, best = max(((t, self.at(scorer, t)) for t in self.thresholds), key=lambda x: x[1]["f"])
        return {"threshold": round(float(t), 2), "span": best}

    def log(self, metrics: Metrics) -> Metrics:
        return {"dev_span": metrics}
