"""``spacy_pel.linker_scorer.v1``: the scorer of ``pel_linker`` in ``nlp.evaluate``, ``spacy evaluate``
and ``spacy train`` (``[components.pel_linker.scorer]``, like spaCy's ``spacy.entity_linker_scorer.v1``).

It returns spaCy's ``Scorer.score_links`` figures (``nel_micro_p/r/f``, ``nel_macro_*``,
``nel_f_per_type``: exact spans of ``doc.ents``, ids compared as strings), ``pel_nel_p/r/f`` (NEL over
in-KB gold mentions, a composite mention right when linked to any of its ids, alternative ids as their
entity: recall = recall@1 of ``spacy_pel evaluate`` when there is no NIL threshold) and the project's own, the
figures of ``python -m spacy_pel evaluate`` (:func:`spacy_pel.evaluation.linking.metrics`) over the
predicted mentions whose offsets match a gold mention (``corpora.gold_spans``: with gold mentions, all
of them; each gold mention scored against its own ids, once — a span annotated twice is two mentions,
paired by label), from the candidates in ``span._.pel_candidates``:

* ``pel_r1``, ``pel_r2`` … up to the linker's ``top_k``: recall@k of the mentions whose gold id is
  in the KB (a composite mention counts when any of its ids is found); ``pel_r1_linkable``: recall@1
  counting gold ids absent from the KB as misses;
* ``pel_nil_p/r/f`` and ``pel_nil_ap`` (NIL detection with the linker's threshold, and its
  threshold-free average precision), ``pel_accuracy_with_nil``;
* ``pel_mentions``, ``pel_in_kb``, ``pel_absent``, ``pel_nil``: the counts.

A figure of nothing is None (n/a), as in ``spacy_pel evaluate``'s report: recall@k with no in-KB gold mention,
NIL precision with nothing called NIL, NIL recall (and AP) with no gold NIL mention, an F1 without both, ``pel_nel_p``
with nothing linked. ``pel_r1`` alone is 0.0 there: it is in the linker's default ``score_weights`` (and the
shipped configs'), and ``spacy train`` drops a None score from its weighted score for the rest of the run.

spaCy's ``spacy evaluate`` prints a fixed table (TOK, NER, SPAN … rows) with no NEL row; its
``--output`` JSON holds every score. With ``cli_spans_key`` (default ``"nel"``) ``pel_nel_p/r/f`` are
also returned as ``spans_nel_p/r/f``, and the same figures per gold label, over the same mentions, as
``spans_nel_per_type`` (spaCy's ``nel_f_per_type`` stays as it is), so that ``spacy evaluate PIPELINE CORPUS
--spans-key nel`` prints them, as its SPAN P/R/F rows and the per-type table under them (null: not returned).

``others``: the (examples, settings) of further linkers of the pipeline (one per KB, each with
``labels``), scored with these as one (:mod:`spacy_pel.pipeline.scoring`): every figure over all their
mentions, each linker's looked up in its own KB, NIL decided by its own threshold.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
from spacy.scorer import Scorer
from spacy.tokens import Span
from spacy.training import Example
from spacy.util import registry

from ..corpora import NIL, gold_ids, gold_spans
from ..pipeline.span_data import CANDIDATES_ATTR, CONFIDENCE_ATTR
from .linking import KS, metrics, row_confidence
from .metrics import rates


class _AnyId:
    """Stands for the KB ids when the caller gives none: every non-NIL gold id counts as in the KB."""

    def __contains__(self, item) -> bool:
        return True


class _PooledIds:
    """The KB ids of several linkers (one per KB): ``(n, id)`` is in it when ``id`` is in the n-th one's KB."""

    def __init__(self, kbs: List[Any]):
        self.kbs = kbs

    def __contains__(self, item) -> bool:
        n, i = item
        return i in self.kbs[n]


def candidate_rows(examples: Iterable[Example], canonical: Optional[Callable[[str], str]] = None) -> List[tuple]:
    """Rows of :func:`~spacy_pel.evaluation.linking.metrics` (gold ids, candidate ids, scores) for
    each predicted mention whose offsets match a gold one; ``canonical`` maps a gold alternative id to
    its entity's primary id (``EntityIndex.canonical``). Each gold mention is scored against its own ids
    and given at most one predicted mention (:func:`paired_gold`): a span annotated twice (Chemical D1 and
    Drug D4) is two gold mentions, as ``python -m spacy_pel evaluate`` counts it."""
    return labelled_rows(examples, canonical)[0]


def labelled_rows(examples: Iterable[Example], canonical: Optional[Callable[[str], str]] = None) -> Tuple[List[tuple], List[str]]:
    """:func:`candidate_rows` and, per row, the label of its gold mention."""
    canonical = canonical or (lambda x: x)
    rows, labels = [], []
    for eg in examples:
        predicted = list(gold_spans(eg.predicted))
        for span, gold in zip(predicted, paired_gold(predicted, gold_spans(eg.reference))):
            if gold is None:
                continue
            ids = [canonical(i) for i in gold_ids(gold.kb_id_)]
            found = span._.get(CANDIDATES_ATTR) or []
            scores = np.array([c[2] for c in found] or [0.0], dtype=np.float32)  # none: as a wordless mention
            confidence = span._.get(CONFIDENCE_ATTR)
            rows.append((ids, [c[0] for c in found], scores, float(scores[0] if confidence is None else confidence)))
            labels.append(gold.label_)
    return rows, labels


def paired_gold(predicted: Sequence[Span], gold: Sequence[Span]) -> List[Optional[Span]]:
    """Per predicted span, the gold span at its offsets (None: none left), each gold span paired once: of
    several at the same offsets, first one of the same label, then the others in their order."""
    at: Dict[Tuple[int, int], List[int]] = {}
    for g, span in enumerate(gold):
        at.setdefault((span.start_char, span.end_char), []).append(g)
    pairs: List[Optional[Span]] = [None] * len(predicted)
    for same_label in (True, False):
        for n, span in enumerate(predicted):
            free = at.get((span.start_char, span.end_char), [])
            g = next((g for g in free if gold[g].label == span.label or not same_label), None)
            if pairs[n] is None and g is not None:
                pairs[n] = gold[g]
                free.remove(g)
    return pairs


Threshold = Union[None, float, List[Optional[float]]]  # one for every row, or one per row (None: never NIL)
Part = Tuple[List[Example], Dict[str, Any]]  # one linker's examples and settings (``nil_label``, ``kb_ids`` …)


def pooled_rows(parts: Sequence[Part]) -> Tuple[List[tuple], _PooledIds, List[Optional[float]], List[str]]:
    """The :func:`candidate_rows` of several linkers' (examples, settings) scored as one, their KB ids,
    each row's threshold and each row's gold label: the n-th linker's ids as ``(n, id)`` (a gold NIL as it is),
    so that each is looked up in its own KB and matched by its own candidates."""
    rows: List[tuple] = []
    kbs: List[Any] = []
    limits: List[Optional[float]] = []
    labels: List[str] = []
    for n, (examples, settings) in enumerate(parts):
        own, own_labels = labelled_rows(examples, settings.get("canonical"))
        labels += own_labels
        rows += [(gold if gold == [NIL] else [(n, i) for i in gold], [(n, c) for c in cands], scores, confidence)
                 for gold, cands, scores, confidence in own]
        kbs.append(_AnyId() if settings.get("kb_ids") is None else settings["kb_ids"])
        limits += [settings.get("threshold")] * len(own)
    return rows, _PooledIds(kbs), limits, labels


def pel_scores(rows: List[tuple], kb_ids=None, threshold: Threshold = None, top_k: Optional[int] = None) -> Dict[str, Any]:
    """The ``pel_*`` figures of ``rows`` (see the module doc)."""
    if isinstance(threshold, list):  # one per row: metrics compares the confidences with them row by row
        limits = [-np.inf if t is None else t for t in threshold]
        threshold = None if all(t is None for t in threshold) else np.array(limits)
    report = metrics(rows, 0.0, _AnyId() if kb_ids is None else kb_ids, None, threshold)
    recall, linkable, nil, counts = report["recall_in_kb"], report["recall_all_linkable"], report["nil"], report["counts"]
    out: Dict[str, Any] = {f"pel_r{k}": recall.get(f"R@{k}") for k in KS if top_k is None or k <= top_k}
    out["pel_r1"] = recall.get("R@1", 0.0)  # a number: spacy train weighs it (see the module doc)
    out["pel_r1_linkable"] = linkable.get("R@1")
    out.update({f"pel_nil_{x}": nil[x] for x in ("p", "r", "f")})
    out["pel_nil_ap"] = nil["average_precision"]
    out["pel_accuracy_with_nil"] = report["accuracy_with_nil"]
    out["pel_mentions"] = report["mentions"]
    out.update({f"pel_{group}": counts[group] for group in ("in_kb", "absent", "nil")})
    return out


def linked_prf(rows: List[tuple], kb_ids=None, threshold: Threshold = None) -> Dict[str, Optional[float]]:
    """NEL P/R/F over the mentions whose gold id is in the KB: right when the linked id is one of the
    gold ids (a composite mention ``A|B`` linked to A is right; ``Scorer.score_links`` compares the
    strings); NIL by ``threshold`` is no prediction. Without a threshold, R = P = recall@1. P with nothing
    linked, R with no in-KB mention (and F without both) are None (n/a)."""
    kb_ids = _AnyId() if kb_ids is None else kb_ids
    limits = threshold if isinstance(threshold, list) else [threshold] * len(rows)
    in_kb = [(row, t) for row, t in zip(rows, limits) if row[0] != [NIL] and any(g in kb_ids for g in row[0])]
    linked = [(row[0], row[1]) for row, t in in_kb if row[1] and (t is None or row_confidence(row) >= t)]
    return rates(sum(cands[0] in gold for gold, cands in linked), len(linked), len(in_kb))


def linked_prf_per_label(rows: List[tuple], labels: Sequence[str], kb_ids=None,
                         threshold: Threshold = None) -> Dict[str, Dict[str, Optional[float]]]:
    """:func:`linked_prf` of the rows of each gold label (``labels``: one per row), in the order of the labels;
    a label with no in-KB mention and nothing linked (every figure n/a) is left out."""
    limits = threshold if isinstance(threshold, list) else [threshold] * len(rows)
    out = {}
    for label in sorted(set(labels)):
        idx = [n for n, x in enumerate(labels) if x == label]
        figures = linked_prf([rows[n] for n in idx], kb_ids, [limits[n] for n in idx])
        if any(v is not None for v in figures.values()):
            out[label] = figures
    return out


class LinkerScorer:
    """The scorer of ``pel_linker`` (see the module doc); an object, not a closure, so that a pipeline holding
    it pickles (``nlp.pipe(n_process=…)`` with spawned processes)."""

    def __init__(self, cli_spans_key: Optional[str] = "nel"):
        self.cli_spans_key = cli_spans_key

    def __call__(self, examples: Iterable[Example], *, nil_label: str = NIL, kb_ids=None, threshold: Optional[float] = None,
                 top_k: Optional[int] = None, canonical: Optional[Callable[[str], str]] = None,
                 others: Sequence[Part] = (), **kwargs) -> Dict[str, Any]:
        settings = {"nil_label": nil_label, "kb_ids": kb_ids, "threshold": threshold, "top_k": top_k,
                    "canonical": canonical}
        parts = [(list(egs), part) for egs, part in [(examples, settings), *others]]
        # the corpus's NIL (gold) and the linkers' nil_label (predictions): neither is a link
        negative = sorted({NIL} | {part.get("nil_label", NIL) for _, part in parts})
        scores: Dict[str, Any] = Scorer.score_links([eg for egs, _ in parts for eg in egs], negative_labels=negative)
        if others:
            rows, kb_ids, threshold, labels = pooled_rows(parts)
            depths = [part.get("top_k") for _, part in parts]
            top_k = None if None in depths else max(depths)
        else:
            rows, labels = labelled_rows(parts[0][0], canonical)
        scores.update(pel_scores(rows, kb_ids, threshold, top_k))
        scores.update({f"pel_nel_{x}": v for x, v in linked_prf(rows, kb_ids, threshold).items()})
        if self.cli_spans_key:
            key = f"spans_{self.cli_spans_key}"
            scores.update({f"{key}_{x}": scores[f"pel_nel_{x}"] for x in ("p", "r", "f")})
            scores[f"{key}_per_type"] = linked_prf_per_label(rows, labels, kb_ids, threshold)  # the SPAN row's mentions
        return scores


@registry.scorers("spacy_pel.linker_scorer.v1")
def make_linker_scorer(cli_spans_key: Optional[str] = "nel") -> Callable[..., Dict[str, Any]]:
    """The scorer of ``pel_linker`` (see the module doc)."""
    return LinkerScorer(cli_spans_key)
