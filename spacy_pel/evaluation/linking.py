"""Retrieval and NIL metrics for a ``pel_linker`` over a gold corpus (``python -m spacy_pel.evaluate``).

Every gold mention falls in one of three groups, reported separately and never dropped:

* ``in_kb``: a gold id is in the KB — recall@k (k = 1, 2, 4, … 64) is measured on these, split into
  seen / unseen by whether a gold id occurs in the training corpus;
* ``absent``: the gold ids are real ids the KB lacks (e.g. retired MeSH records) — unretrievable;
  ``recall@k (all linkable)`` counts them as misses;
* ``nil``: gold ``NIL`` — used for NIL precision / recall / F1 (with the component's threshold) and
  the threshold-free NIL average precision.

The mentions are linked as the pipeline links them, with its own ``top_k``: recall@1, the NIL
figures and mentions/s are what ``nlp(doc)`` gives. Recall@k beyond ``top_k`` adds the candidates of a
second, untimed pass with 64 (:mod:`spacy_pel.pipeline.depth`).
"""
from __future__ import annotations

import time
from typing import Callable, Collection, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

import numpy as np
from spacy.tokens import Doc, Span
from tqdm.auto import tqdm

from ..corpora import NIL, gold_ids, gold_spans
from ..pipeline.depth import deepen
from ..pipeline.given_mentions import spans_written
from ..pipeline.linker import PELLinker
from ..pipeline.mentions import linked_gold
from .metrics import PLACES, Report, average_precision, exact, max_matching, rates, ratio, rounded, shown

KS = (1, 2, 4, 8, 16, 32, 64)


def mention_table(
    linker: PELLinker, docs: Sequence[Doc], k: Optional[int] = None, docs_per_step: int = 8, progress: bool = False,
    deep: int = max(KS),
):
    """Link the gold mentions of ``docs`` (whatever mention source the linker has); returns rows
    (gold ids — an entity's alternative id given as its primary id —, candidate ids, scores, NIL
    confidence, NIL evidence features) and seconds. ``docs_per_step`` documents go to the linker at a
    time (it pools their mentions into its batches); the progress bar counts mentions.

    With ``k`` None the rows are what the pipeline does: its own ``top_k`` candidates, in its order
    (the rules re-score the candidates they are given, so a deeper search can change the first one),
    with the NIL evidence it decides on and its time; where ``deep`` is larger, a second pass with
    ``deep`` candidates appends the ones the first lacks, for recall@k beyond ``top_k`` (untimed;
    :func:`~spacy_pel.pipeline.depth.deepen`).
    With ``k`` given: one pass with ``k`` candidates. A linker whose mention source links some labels only
    (one linker per KB) is given the gold mentions of those labels only."""
    golds = [linked_gold(linker.mentions, doc) for doc in docs]
    spans = [[(s.start, s.end, s.label) for s in doc_golds] for doc_golds in golds]
    linker.ensure_loaded()
    first = k or linker.top_k
    predictions, seconds = _link(linker, docs, spans, first, docs_per_step, progress, "linking")
    if k is None and deep > first:
        further, _ = _link(linker, docs, spans, deep, docs_per_step, progress, f"top {deep} candidates")
        predictions = [deepen(a, b) for a, b in zip(predictions, further)]
    ids = linker.index.entities.ids
    rows = []
    for doc_golds, linked in zip(golds, predictions):
        for span, s, r, c, f in zip(doc_golds, *linked):
            gold = [linker.index.canonical(i) for i in gold_ids(span.kb_id_)]  # alternative ids → primary
            rows.append((gold, [ids[j] if j >= 0 else None for j in r], s, float(c), f))
    return rows, seconds


def _link(linker: PELLinker, docs: Sequence[Doc], spans: list, k: int, docs_per_step: int, progress: bool, desc: str):
    """The linker's top-``k`` candidates for the given spans, ``docs_per_step`` docs at a time, and seconds."""
    predictions, seconds = [], 0.0
    with tqdm(total=sum(map(len, spans)), desc=desc, unit=" mentions", disable=not progress, smoothing=0.05) as bar:
        for i in range(0, len(docs), docs_per_step):
            t0 = time.perf_counter()
            predictions.extend(linker.candidates(docs[i : i + docs_per_step], spans[i : i + docs_per_step], k=k))
            seconds += time.perf_counter() - t0
            bar.update(sum(map(len, spans[i : i + docs_per_step])))
    return predictions, seconds


def evaluate(
    linker: PELLinker,
    docs: Sequence[Doc],
    train_ids: Optional[set] = None,
    threshold: Optional[float] = None,
    progress: bool = False,
) -> dict:
    """Metrics of ``linker`` on the gold mentions of ``docs`` (see the module doc)."""
    rows, seconds = mention_table(linker, docs, progress=progress)
    threshold = linker.threshold if threshold is None else threshold
    return metrics(rows, seconds, linker.index.row, canonical_ids(linker, train_ids), threshold)


def canonical_ids(linker: PELLinker, ids: Optional[set]) -> Optional[set]:
    """Corpus ids with alternative ids given as their entity's primary id (as :func:`mention_table` does)."""
    return None if ids is None else {linker.index.canonical(i) for i in ids}


def row_confidence(row) -> float:
    """A :func:`mention_table` row's NIL confidence: its 4th element, or its top score when it has three."""
    return float(row[3]) if len(row) > 3 else float(row[2][0]) if len(row[2]) else -np.inf


def has_candidate(row) -> bool:
    """Whether a :func:`mention_table` row has a first candidate: a mention without one (no word character, an
    empty KB) is NIL whatever the threshold, as ``PELLinker.decide`` makes it."""
    return bool(row[1]) and row[1][0] is not None


def metrics(rows, seconds: float, kb_ids, train_ids: Optional[set] = None, threshold: Optional[float] = None) -> dict:
    """Metrics from :func:`mention_table` rows; ``kb_ids`` is the set (or dict) of ids in the KB;
    NIL is decided on :func:`row_confidence`, and a mention with no candidate is NIL (:func:`has_candidate`).
    A figure of nothing (NIL precision with nothing called NIL, NIL recall with no gold NIL mention, accuracy of
    no mention) is None (n/a); a group without mentions has no recall (``{}``). The figures are rounded to 4
    places, the exact ones kept for :func:`markdown` (:func:`rounded_report`)."""
    groups: Dict[str, List[int]] = {"in_kb": [], "absent": [], "nil": [], "seen": [], "unseen": []}
    ranks = np.full(len(rows), np.inf)
    top = np.zeros(len(rows))
    for n, row in enumerate(rows):
        gold, cands = row[0], row[1]
        top[n] = row_confidence(row)
        if gold == [NIL]:
            groups["nil"].append(n)
            continue
        if not any(g in kb_ids for g in gold):
            groups["absent"].append(n)
            continue
        groups["in_kb"].append(n)
        if train_ids is not None:
            groups["seen" if any(g in train_ids for g in gold) else "unseen"].append(n)
        hit = [r for r, c in enumerate(cands) if c in gold]
        ranks[n] = hit[0] + 1 if hit else np.inf

    def recall(idx: List[int]) -> Dict[str, float]:
        if not idx:
            return {}
        r = ranks[idx]
        return {f"R@{k}": float((r <= k).mean()) for k in KS}

    linkable = groups["in_kb"] + groups["absent"]
    is_nil = np.array([row[0] == [NIL] for row in rows], dtype=bool)
    pred_nil = top < threshold if threshold is not None else np.zeros(len(rows), bool)
    pred_nil |= np.array([not has_candidate(row) for row in rows], dtype=bool)  # the linker's NIL whatever the threshold
    correct = np.where(is_nil, pred_nil, (ranks <= 1) & ~pred_nil)
    report = {
        "mentions": len(rows),
        "counts": {k: len(v) for k, v in groups.items() if k not in ("seen", "unseen") or train_ids is not None},
        "recall_in_kb": recall(groups["in_kb"]),
        "recall_all_linkable": recall(linkable),
        "threshold": threshold,
        "accuracy_with_nil": ratio(float(correct.sum()), len(rows)),
        "nil": {
            **rates(int((pred_nil & is_nil).sum()), int(pred_nil.sum()), int(is_nil.sum())),
            "average_precision": average_precision(is_nil.astype(int), -top) if is_nil.any() else None,
        },
        "seconds": round(seconds, 2),
        "mentions_per_s": round(len(rows) / seconds, 1) if seconds else None,
    }
    if train_ids is not None:
        report["recall_seen"] = recall(groups["seen"])
        report["recall_unseen"] = recall(groups["unseen"])
    return rounded_report(report)


E2E_MEASURES = ("strict", "typed", "partial", "span")


def rounded_report(report: dict, places: int = PLACES) -> Report:
    """A :func:`metrics` or :func:`e2e_metrics` report of exact figures as its JSON holds them: every figure (the
    recalls, NIL P/R/F1 and AP, accuracy, the end-to-end P/R/F1) rounded to ``places``, the threshold, counts and
    times as they are; the exact report stays its ``exact`` (:class:`~.metrics.Report`)."""
    keys = [k for k in report if k.startswith("recall_") or k in ("accuracy_with_nil", "nil", *E2E_MEASURES)]
    return Report({**report, **{k: rounded(report[k], places) for k in keys}}, report)


def pipeline_nil_labels(nlp) -> Set[str]:
    """What the found spans of ``nlp`` carry for "no entity": the corpus's ``NIL`` and each ``pel_linker``'s
    ``nil_label`` (a setting: ``"CUI-less"`` is as much NIL as ``"NIL"``)."""
    return {NIL} | {proc.cfg.nil_label for _, proc in nlp.pipeline if isinstance(proc, PELLinker)}


def _same(entity_id: str) -> str:
    return entity_id


def _ents(doc: Doc) -> Sequence[Span]:
    return doc.ents


class Scope(NamedTuple):
    """What the end-to-end measures count and how they spell ids: ``keep`` picks, of a document's spans (found or
    gold), those scored; ``canonical(span)`` maps an id of that mention to its entity's primary id, by the KB of
    the linker that links the span's label; ``found(doc)``: the spans a predicted document's linkers linked, in
    the mention sources they read and write (``doc.ents``, a span group: :func:`linkers_found`; default
    ``doc.ents``)."""

    keep: Callable[[Sequence[Span]], Sequence[Span]]
    canonical: Callable[[Span], Callable[[str], str]]
    found: Callable[[Doc], Sequence[Span]] = _ents


Canonical = Union[Scope, Callable[[str], str], None]  # a Scope, or one id mapping for every span (None: ids as they are)


def as_scope(canonical: Canonical) -> Scope:
    """A :class:`Scope` as it is; an id mapping (or None): every span, each id mapped by it."""
    if isinstance(canonical, Scope):
        return canonical
    same = canonical or _same
    return Scope(list, lambda span: same)


def linkers_found(linkers: Sequence[PELLinker]) -> Callable[[Doc], Sequence[Span]]:
    """The spans ``linkers`` linked in a document: those of their mention sources (``doc.ents``, the span group a
    ``span_group.v1`` source reads, a span finder's), as ``link`` writes them
    (:func:`~spacy_pel.pipeline.given_mentions.spans_written`); ``doc.ents`` when there is no linker."""
    if not linkers:
        return _ents
    return lambda doc: spans_written(doc, [linker.mentions for linker in linkers])


def _and_ents(found: Callable[[Doc], Sequence[Span]]) -> Callable[[Doc], Sequence[Span]]:
    """``found`` and the rest of ``doc.ents`` (an NER's spans of labels no linker links still count as found spans,
    as before span groups were read), in document order."""
    def spans(doc: Doc) -> Sequence[Span]:
        linked = list(found(doc))
        seen = {(s.start_char, s.end_char, s.label_) for s in linked}
        rest = [e for e in doc.ents if (e.start_char, e.end_char, e.label_) not in seen]
        return sorted(linked + rest, key=lambda s: (s.start_char, s.end_char))
    return spans


def linker_scope(linker: PELLinker) -> Scope:
    """One pel_linker's share of a pipeline's output (``--linker``): the spans it links (of its labels: every span
    for a linker of all labels, a mention source without ``of_labels``), their ids spelt by its KB."""
    linker.ensure_loaded()
    return Scope(getattr(linker.mentions, "of_labels", list), lambda span: linker.index.canonical, linkers_found([linker]))


def pipeline_scope(nlp) -> Scope:
    """A pipeline's whole output: every span of ``doc.ents`` and every span its pel_linkers link in the span group
    each reads, a mention's ids spelt by the KB of the pel_linker that links its label (with one linker per KB,
    each label's own; of several that link it, the last, whose ids the span keeps; a label no linker links: its ids
    as they are)."""
    linkers = [proc for _, proc in nlp.pipeline if isinstance(proc, PELLinker)]
    by_label: Dict[str, Callable[[str], str]] = {}

    def canonical(span: Span) -> Callable[[str], str]:
        if span.label_ not in by_label:
            owner = next((x for x in reversed(linkers) if list(getattr(x.mentions, "of_labels", list)([span]))), None)
            if owner is not None:
                owner.ensure_loaded()
            by_label[span.label_] = _same if owner is None else owner.index.canonical
        return by_label[span.label_]

    return Scope(list, canonical, _and_ents(linkers_found(linkers)))


def linked_mentions(pred_doc: Doc, gold_doc: Doc, canonical: Canonical = None,
                    nil_labels: Collection[str] = (NIL,)) -> Tuple[list, list]:
    """What the end-to-end linked measures count in one document: its gold mentions with an id
    ``(start_char, end_char, ids, label)`` and its found spans linked to an entity
    ``(start_char, end_char, id, label, span)`` (those its ``found`` gives: the spans the linkers linked), of the
    :class:`Scope` ``canonical`` (an id mapping: every span of ``doc.ents``, ids mapped by it) with ids spelt by it;
    left out: gold ``NIL`` mentions and found spans whose id is one of
    ``nil_labels`` (the linkers' NIL, :func:`pipeline_nil_labels`)."""
    scope = as_scope(canonical)
    golds = [(s.start_char, s.end_char, {scope.canonical(s)(i) for i in gold_ids(s.kb_id_)}, s.label_)
             for s in scope.keep(gold_spans(gold_doc)) if s.kb_id_ != NIL]
    preds = [(s.start_char, s.end_char, scope.canonical(s)(s.kb_id_), s.label_, s) for s in scope.keep(scope.found(pred_doc))
             if s.kb_id_ and s.kb_id_ not in nil_labels]
    return golds, preds


def exact_hits(golds: Sequence[tuple], preds: Sequence[tuple]) -> List[Tuple[bool, bool]]:
    """Per found span of :func:`linked_mentions` (``preds``: ``(start, end, id, label, …)``), whether it is a
    strict hit — a gold mention of the same span has its id — and a typed one — with its label too. A span
    annotated twice (Chemical D1 and Drug D4) has two gold mentions: a found span matches either; each gold
    mention is matched at most once per measure, by a maximum one-to-one matching (found spans of one offsets,
    as a span group can hold, get as many hits as can be had, whatever their order)."""
    at: Dict[Tuple[int, int], List[int]] = {}
    for g, (x, y, _, _) in enumerate(golds):
        at.setdefault((x, y), []).append(g)
    right = [sorted((g for g in at.get((a, b), ()) if i in golds[g][2]), key=lambda g: golds[g][3] != label)
             for a, b, i, label, *_ in preds]  # the gold mention of the same label first
    strict = max_matching(right)
    typed = max_matching([[g for g in gs if golds[g][3] == pred[3]] for gs, pred in zip(right, preds)])
    return [(s is not None, t is not None) for s, t in zip(strict, typed)]


def partial_hits(golds: Sequence[tuple], preds: Sequence[tuple]) -> int:
    """The partial hits of one document's :func:`linked_mentions`: found spans overlapping a gold mention with its
    id, each gold mention matched at most once — a maximum one-to-one matching, so the count does not depend on
    the order of either side."""
    edges = [[g for g, (x, y, ids, _) in enumerate(golds) if a < y and x < b and i in ids] for a, b, i, *_ in preds]
    return sum(m is not None for m in max_matching(edges))


def e2e_metrics(predicted: Sequence[Doc], gold: Sequence[Doc], canonical: Canonical = None,
                nil_labels: Collection[str] = (NIL,)) -> dict:
    """End-to-end micro P/R/F1:

    * ``strict``: same span, right id; ``typed``: same span, same label, right id (a span annotated
      twice: either gold mention; each gold mention matched at most once, :func:`exact_hits`);
    * ``partial``: overlapping span, right id (each gold mention matched at most once: the most hits a
      one-to-one matching of the document's found and gold mentions has, :func:`partial_hits`);
    * ``span``: same span boundaries, ids ignored (every predicted and gold span, NIL ones included).

    Spans are compared by character offsets, so a document tokenised differently from the gold one
    (``nlp.make_doc(text)`` where the corpus split tokens at its annotations) is scored by what was found.

    For the linked measures NIL gold mentions and NIL predictions (an id in ``nil_labels``: give the
    pipeline's, :func:`pipeline_nil_labels`) are left out. ``canonical`` (the
    linker's ``index.canonical``) maps an id to its entity's primary id, on both sides, as
    :func:`mention_table` does for gold mentions: a gold alternative id (an OMIM number MEDIC files
    under a MeSH record) is then matched by the entity the linker returns. A :class:`Scope` instead (one
    linker's: :func:`linker_scope`; a pipeline's with one linker per KB: :func:`pipeline_scope`) also picks the
    spans scored, on both sides and for every measure, and spells each mention's ids by its label's KB; its found
    spans are those the linkers linked (``doc.ents``, or the span group a ``span_group.v1`` source reads), where
    an id mapping scores ``doc.ents``.

    P with no found span, R with no gold mention and F1 without both are None (n/a). The figures are rounded to
    4 places, the exact ones kept (:func:`rounded_report`)."""
    scope = as_scope(canonical)
    tp_strict = tp_typed = tp_partial = n_pred = n_gold = 0
    span_tp = span_pred = span_gold = 0
    for pred_doc, gold_doc in zip(predicted, gold):
        golds, preds = linked_mentions(pred_doc, gold_doc, scope, nil_labels)
        n_gold, n_pred = n_gold + len(golds), n_pred + len(preds)
        hits = exact_hits(golds, preds)
        tp_strict += sum(strict for strict, _ in hits)
        tp_typed += sum(typed for _, typed in hits)
        tp_partial += partial_hits(golds, preds)
        found = {(s.start_char, s.end_char) for s in scope.keep(scope.found(pred_doc))}
        wanted = {(s.start_char, s.end_char) for s in scope.keep(gold_spans(gold_doc))}
        span_tp, span_pred, span_gold = span_tp + len(found & wanted), span_pred + len(found), span_gold + len(wanted)
    report = {"strict": rates(tp_strict, n_pred, n_gold), "partial": rates(tp_partial, n_pred, n_gold),
              "typed": rates(tp_typed, n_pred, n_gold), "span": rates(span_tp, span_pred, span_gold),
              "predicted": n_pred, "gold": n_gold}
    return rounded_report(report)


def markdown(report: dict, title: str = "spacy_pel evaluation") -> str:
    """The table of a :func:`metrics` report, each figure formatted once from the exact one (3 places; n/a for an
    undefined one)."""
    report = exact(report)
    lines = [f"## {title}", "", "| subset | mentions | " + " | ".join(f"R@{k}" for k in KS) + " |"]
    lines.append("|---|---:|" + "---:|" * len(KS))
    c = report["counts"]
    for name, key, n in [
        ("gold id in KB", "recall_in_kb", c["in_kb"]),
        ("seen in training", "recall_seen", c.get("seen")),
        ("unseen (zero-shot)", "recall_unseen", c.get("unseen")),
        ("all linkable (absent ids = miss)", "recall_all_linkable", c["in_kb"] + c["absent"]),
    ]:
        if report.get(key):
            lines.append(f"| {name} | {n} | " + " | ".join(shown(report[key][f"R@{k}"]) for k in KS) + " |")
    nil = report["nil"]
    lines += [
        "",
        f"- mentions: {report['mentions']} (in KB {c['in_kb']}, gold id absent from KB {c['absent']}, NIL {c['nil']})"
        + (" — ids the KB lacks may be from an older KB release: `convert --id-map` rewrites them" if c["absent"] else ""),
        f"- NIL threshold: {'none' if report['threshold'] is None else shown(report['threshold'])}; "
        f"NIL P/R/F1: {shown(nil['p'])} / {shown(nil['r'])} / {shown(nil['f'])}; "
        f"NIL average precision: {shown(nil['average_precision'])}",
        f"- accuracy over all mentions, NIL included: {shown(report['accuracy_with_nil'])}",
        f"- linking speed: {report['mentions_per_s']} mentions/s ({report['seconds']} s)",
        "",
    ]
    return "\n".join(lines)
