"""``python -m spacy_pel.calibrate``: fit how a pipeline decides NIL on a corpus with NIL mentions —
the threshold with the best NIL F1 (optionally at a bounded loss of in-KB recall@1) and, with
``nil="classifier"``, the weights of a logistic model over the NIL evidence
(:mod:`spacy_pel.pipeline.nil`; ``"classifier_pairs"``: over the evidence and its pairwise products) — write them into the pipeline's config, and save the NIL
precision-recall curve (PNG + JSON). A corpus without NIL mentions (NCBI disease) calibrates nothing:
the pipeline is saved with its NIL decision as it was, and ``nil_calibration.json`` says so. With one
pel_linker per KB, one linker is calibrated on the gold mentions (and found spans) of its labels, and each
keeps its own record (:mod:`spacy_pel.evaluation.calibration_record`).

With ``e2e`` (a pipeline that finds its own mentions): the threshold on the pipeline's NIL confidence
with the best *strict end-to-end* F1 on the corpus's raw text. A found span below it is NIL, so the
threshold also drops the spurious spans the span finder adds (a span nothing in the KB fits well),
which gold mentions alone cannot show; it needs no NIL mention in the corpus. With ``e2e`` and
``nil="classifier"`` the logistic model is fitted to tell the found spans that are strict hits (right
boundaries, right id) from the rest, over the NIL evidence — the span model's probability of the span
among it — and the threshold on its confidence is then chosen the same way."""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Collection, Dict, List, NamedTuple, Optional, Sequence

import numpy as np
import spacy
from sklearn.linear_model import LogisticRegression
from spacy.tokens import Doc

from ..corpora import NIL, gold_ids, gold_spans, raw_doc, read_docbin
from ..files import InputError
from ..pipeline.linker import configure_linker, find_linker
from ..pipeline.linking_mode import check_mode_settings, linking_mode
from ..pipeline.nil import FEATURES, PAIRS, ClassifierNil, pair_products, threshold_range
from ..pipeline.retarget import check_output
from ..pipeline.span_data import CONFIDENCE_ATTR
from ..pipeline.updating import check_linkable, doc_gold_mentions, linkable_mentions, require_linked_gold
from ..retrieval.index import EntityIndex
from .calibration_record import save_calibrated
from .linking import Canonical, exact_hits, linked_mentions, linker_scope, mention_table, pipeline_nil_labels
from .nil_curve import nil_curve, plot_curve

NIL_STRATEGIES = ("top_score", "classifier", "classifier_pairs")
TYPE_SHARE = 0.05  # a KB type goes with a label when at least this share of the label's gold entities has it


def _save_uncalibrated(nlp, name: str, linker, mentions: int, corpus: Path, pipeline: Path, output: Path,
                       plot: Optional[Path]) -> dict:
    """No gold NIL mention among the linker's ``mentions`` (NCBI disease; with one linker per KB, none of its
    labels'): nothing to calibrate on, the pipeline is saved with its NIL decision as it was, and the record and
    the plot say why."""
    labels = getattr(linker.mentions, "labels", None)
    which = f" of the labels {name} links ({', '.join(sorted(labels))})" if isinstance(labels, (set, frozenset, list, tuple)) else ""
    summary = {"calibrated": False, "linker": name, "mentions": mentions, "nil_mentions": 0,
               "reason": f"{corpus} has no gold NIL mentions{which}: the NIL decision is left as it was"}
    save_calibrated(nlp, name, pipeline, output, summary)
    if plot:
        plot_curve(None, plot)
    return summary


def label_types(docs, index: EntityIndex, share: float = TYPE_SHARE) -> Dict[str, List[str]]:
    """Per gold label, the KB types held by at least ``share`` of its in-KB gold mentions' entities."""
    counts: Dict[str, Counter] = defaultdict(Counter)
    totals: Counter = Counter()
    for doc in docs:
        for span in gold_spans(doc):
            row = next((r for r in map(index.resolve, gold_ids(span.kb_id_)) if r is not None), None)
            if span.label_ and row is not None:
                totals[span.label_] += 1
                counts[span.label_].update(set(index.entities.types[row]))
    return {label: sorted(t for t, c in counts[label].items() if c >= share * totals[label]) for label in sorted(totals)}


def fit_classifier(features: np.ndarray, is_nil: np.ndarray, types: Dict[str, List[str]], pairs: bool = False) -> ClassifierNil:
    """A logistic model of P(in KB) over the NIL evidence (columns: :data:`~spacy_pel.pipeline.nil.FEATURES`);
    with ``pairs``, over the features and their pairwise products (:data:`~spacy_pel.pipeline.nil.PAIRS`),
    fitted on standardised terms (so one regularisation suits them all) and written back as weights on
    the raw terms. A feature constant over the mentions (``span`` for mentions a pipeline is given) tells
    nothing: it and its products are left out (weight 0), so they cannot double another term."""
    if not is_nil.any() or is_nil.all():
        raise InputError("fitting the NIL classifier needs both NIL and in-KB mentions")
    raw = features.astype(np.float64)
    varies = {f for f, spread in zip(FEATURES, raw.std(0)) if spread > 1e-9}
    terms, x = list(FEATURES), raw
    if pairs:
        terms, x = terms + list(PAIRS), np.hstack([x, pair_products(raw)])
    used = np.array([set(t.split("*")) <= varies for t in terms])
    terms, x = [t for t, u in zip(terms, used) if u], x[:, used]
    mean, scale = (x.mean(0), x.std(0)) if pairs else (np.zeros(x.shape[1]), np.ones(x.shape[1]))
    scale = np.where(scale > 1e-9, scale, 1.0)
    model = LogisticRegression(C=1.0, max_iter=5000).fit((x - mean) / scale, ~is_nil)
    coef = model.coef_[0] / scale
    bias = float(model.intercept_[0] - coef @ mean)
    weights = {t: round(float(w), 6) for t, w in zip(terms, coef) if not pairs or abs(w) > 1e-9}
    if not pairs:
        weights = {f: weights.get(f, 0.0) for f in FEATURES}
    return ClassifierNil(weights, round(bias, 6), types)


def e2e_curve(predicted: Sequence[Doc], gold: Sequence[Doc], canonical: Canonical = None,
              nil_labels: Collection[str] = (NIL,)) -> dict:
    """Strict end-to-end P/R/F1 (as :func:`~spacy_pel.evaluation.linking.e2e_metrics` counts them) of
    "a found span is NIL if its confidence < t" for every useful t, and the best t. ``predicted``: the
    pipeline's output with no threshold (every found span linked to its best candidate, its confidence
    in ``span._.pel_confidence``; a span with no candidate carries a linker's NIL label, one of
    ``nil_labels``: left out); ties go to the lower threshold (more spans kept). ``canonical``: an id
    mapping, or one linker's :func:`~spacy_pel.evaluation.linking.linker_scope` (its labels' spans and gold
    mentions only)."""
    confidence, correct, n_gold = [], [], 0
    for pred_doc, gold_doc in zip(predicted, gold):
        golds, preds = linked_mentions(pred_doc, gold_doc, canonical, nil_labels)
        n_gold += len(golds)
        for (_, _, _, _, span), (hit, _) in zip(preds, exact_hits(golds, preds)):
            value = span._.get(CONFIDENCE_ATTR)
            confidence.append(np.inf if value is None else value)
            correct.append(hit)
    return strict_curve(np.asarray(confidence, dtype=float), np.asarray(correct, dtype=bool), n_gold)


def strict_curve(confidence: np.ndarray, correct: np.ndarray, n_gold: int) -> dict:
    """:func:`e2e_curve` from the found spans' ``confidence`` and whether each is a strict hit
    (``correct``), against ``n_gold`` gold mentions."""
    order = np.argsort(-confidence, kind="stable")
    conf, hit = confidence[order], correct[order].astype(float)
    tp, n_pred = np.cumsum(hit), np.arange(1, len(hit) + 1)
    # keeping the first i+1 spans: t between conf[i+1] and conf[i]; keeping all: no threshold
    cut = np.append(conf[1:] != conf[:-1], True)
    lower = np.append(conf[1:], -np.inf)
    thresholds = [None if not np.isfinite(lo) else float((hi + lo) / 2) if np.isfinite(hi) else float(lo + 1e-3)
                  for hi, lo in zip(conf, lower)]
    precision = tp / n_pred
    recall = tp / max(n_gold, 1)
    f1 = 2 * tp / (n_pred + n_gold)
    points = [{"threshold": t, "kept": int(n), "p": float(p), "r": float(r), "f": float(f)}
              for t, n, p, r, f, ok in zip(thresholds, n_pred, precision, recall, f1, cut) if ok]
    if not points:
        raise InputError("the pipeline found no linked span in the corpus: nothing to calibrate")
    best = max(range(len(points)), key=lambda k: (round(points[k]["f"], 9), points[k]["kept"]))
    none = points[-1]
    return {**points[best], "without_threshold": {k: none[k] for k in ("p", "r", "f", "kept")}, "gold": n_gold, "points": points}


class FoundEvidence(NamedTuple):
    """The found spans of a corpus's raw text, linked with no threshold: their NIL evidence
    ``features`` ``[n, len(FEATURES)]``, whether each is a strict hit (``correct``), the index of its
    document (``docs``), and the number of gold mentions of each document (``gold``)."""

    features: np.ndarray
    correct: np.ndarray
    docs: np.ndarray
    gold: np.ndarray


def e2e_evidence(nlp, name: str, linker, gold_docs: Sequence[Doc], batch_size: int = 16) -> FoundEvidence:
    """:class:`FoundEvidence` of the pipeline on ``gold_docs``' raw text: the spans ``linker`` links, against the
    gold mentions of its labels. Spans with no candidate (NIL whatever the threshold) are left out, as the
    strict measure does."""
    scope = linker_scope(linker)
    names = [n for n, _ in nlp.pipeline]
    before = [proc for _, proc in nlp.pipeline[: names.index(name)]]
    features, correct, doc_index, n_gold = [], [], [], []
    for i in range(0, len(gold_docs), batch_size):
        part = gold_docs[i : i + batch_size]
        docs = [raw_doc(nlp, d) for d in part]  # the text as a user gives it
        for proc in before:
            docs = [proc(d) for d in docs]
        for j, (doc, gold_doc, (spans, linked)) in enumerate(zip(docs, part, linker.predict(docs))):
            golds, _ = linked_mentions(doc, gold_doc, scope)
            n_gold.append(len(golds))
            found = []
            for (a, b, label), rows, evidence in zip(spans, linked.rows, linked.features):
                if rows[0] < 0:
                    continue
                span = doc[a:b]
                entity = linker.index.canonical(linker.index.entities.ids[rows[0]])
                found.append((span.start_char, span.end_char, entity, doc.vocab.strings[label] if isinstance(label, int) else label))
                features.append(evidence)
                doc_index.append(i + j)
            correct.extend(hit for hit, _ in exact_hits(golds, found))
    return FoundEvidence(np.asarray(features, np.float32).reshape(-1, len(FEATURES)), np.asarray(correct, dtype=bool),
                         np.asarray(doc_index, dtype=np.int64), np.asarray(n_gold, dtype=np.int64))


def fit_e2e_classifier(evidence: FoundEvidence, types: Dict[str, List[str]], pairs: bool = False) -> ClassifierNil:
    """The NIL classifier of an end-to-end pipeline: P(a found span is a strict hit) over its evidence."""
    if evidence.correct.all() or not evidence.correct.any():
        raise InputError("fitting the end-to-end NIL classifier needs found spans that are strict hits and some that are not")
    return fit_classifier(evidence.features, ~evidence.correct, types, pairs=pairs)


def calibrate_e2e(nlp, name: str, linker, gold_docs: Sequence[Doc], corpus: Path, output: Path,
                  plot: Optional[Path] = None, nil: str = "top_score", pipeline: Optional[Path] = None) -> dict:
    """The ``e2e`` calibration (module doc): link the raw text with no threshold, choose the best one
    on strict F1 over the spans ``linker`` links and the gold mentions of its labels (with a classifier
    ``nil``: first fit the classifier to the strict hits — when every found span is one, or none is, there
    is nothing to fit: the pipeline's own strategy is kept and the summary says why), write it into the
    config and save (``pipeline``: the folder calibrated, whose other linkers' records are kept)."""
    configure_linker(nlp, name, threshold=None)
    summary: dict = {"calibrated": True, "linker": name, "objective": "strict end-to-end F1", "corpus": str(corpus),
                     "docs": len(gold_docs)}
    if nil == "top_score":
        predicted = list(nlp.pipe(raw_doc(nlp, d) for d in gold_docs))  # the text as a user gives it
        curve = e2e_curve(predicted, gold_docs, linker_scope(linker), pipeline_nil_labels(nlp))
    else:
        own = linker.nil
        linker.nil = ClassifierNil({}, 0.0, label_types(gold_docs, linker.index))  # unfitted: every feature computed
        evidence = e2e_evidence(nlp, name, linker, gold_docs)
        if evidence.correct.all() or not evidence.correct.any():  # nothing to tell apart: the pipeline's own rule
            linker.nil = own
            summary["classifier"] = None
            summary["reason"] = ("every found span is a strict hit" if evidence.correct.all() else "no found span is a strict hit") + \
                ": no classifier can be fitted; the pipeline's own NIL strategy is kept"
            confidence = own(evidence.features)
        else:
            linker.nil = fit_e2e_classifier(evidence, linker.nil.label_types, pairs=nil == "classifier_pairs")
            nlp.get_pipe_config(name)["nil"] = linker.nil.as_config()
            summary["classifier"] = linker.nil.as_config()
            confidence = linker.nil(evidence.features)
        curve = strict_curve(confidence.astype(float), evidence.correct, int(evidence.gold.sum()))
    configure_linker(nlp, name, threshold=curve["threshold"])
    summary.update({k: v for k, v in curve.items() if k != "points"})
    save_calibrated(nlp, name, pipeline, output, {**summary, "points": curve["points"]})
    if plot:
        plot_e2e_curve(curve, plot)
    return summary


def plot_e2e_curve(curve: dict, path: Path) -> None:
    """Strict end-to-end P, R and F1 against the threshold (PNG), the chosen one marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    points = [p for p in curve["points"] if p["threshold"] is not None]
    fig, ax = plt.subplots(figsize=(5, 4))
    for key, label in (("p", "strict P"), ("r", "strict R"), ("f", "strict F1")):
        ax.plot([p["threshold"] for p in points], [p[key] for p in points], label=label, drawstyle="steps-post")
    if curve["threshold"] is not None:
        ax.axvline(curve["threshold"], color="red", linestyle=":", label=f"threshold {curve['threshold']:.3f} (F1 {curve['f']:.3f})")
    ax.set(xlabel="NIL threshold on the confidence", ylim=(0, 1.02), title="end-to-end NIL threshold")
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def check_discovery_settings(nlp, name: str, nil: str) -> None:
    """Refuse (``InputError``) a NIL classifier for linker ``name`` when a ``pel_discovery`` on it has settings
    only a top-score linker takes (``spacy.load`` would refuse the pipeline written; the rule:
    :func:`~spacy_pel.pipeline.linking_mode.linking_mode`): ``auto`` then links by the classifier's decisions
    (``pipeline``), which takes no ``threshold``; ``cluster`` needs one (an edge floor), the classifier's
    threshold being a probability."""
    for pipe in nlp.pipe_names if nil != "top_score" else ():
        cfg = nlp.get_pipe_config(pipe)
        if cfg.get("factory") != "pel_discovery" or cfg.get("linker") != name:
            continue
        try:  # the threshold calibrate writes stands for the classifier's
            threshold = cfg.get("threshold")
            check_mode_settings(linking_mode(cfg.get("linking", "auto"), threshold, score_confidence=False, rules=False,
                                             nil_threshold=0.5, linker=name), threshold)
        except ValueError as err:
            raise InputError(f"--nil {nil}: {pipe} would not load once {name} decides NIL with a classifier: {err}; "
                             "then calibrate") from err


def check_calibrate_options(output: Path, plot: Optional[Path] = None, max_r1_loss: Optional[float] = None) -> None:
    """What :func:`calibrate` refuses before loading anything (:class:`~spacy_pel.files.InputError`): an
    ``output`` that writing the pipeline would replace (a file, or a folder that is neither empty nor a
    pipeline: the pipeline's own folder or an earlier calibration is one), a ``plot`` whose suffix is
    no format matplotlib writes, a ``max_r1_loss`` that is no share within [0, 1]."""
    check_output(output)
    if plot is not None:
        from matplotlib.backend_bases import FigureCanvasBase  # matplotlib: loaded only to plot

        formats = sorted(FigureCanvasBase.get_supported_filetypes())
        if Path(plot).suffix.lower().lstrip(".") not in formats:
            raise InputError(f"--plot {plot}: give a file name ending in one of {', '.join('.' + f for f in formats)}")
    if max_r1_loss is not None and not 0.0 <= max_r1_loss <= 1.0:  # NaN too
        raise InputError(f"--max-r1-loss must be a share within [0, 1], not {max_r1_loss}")


def calibrate(pipeline: Path, corpus: Path, output: Path, plot: Optional[Path] = None, docs: Sequence[int] = (),
              nil: str = "top_score", max_r1_loss: Optional[float] = None, e2e: bool = False,
              linker_name: Optional[str] = None) -> dict:
    """Calibrate ``pipeline``'s NIL decision on ``corpus`` (optionally only docs[0]:docs[1]) and save
    it to ``output``: ``nil`` is ``top_score`` (a threshold on the best score) or ``classifier``
    (a logistic model over the NIL evidence, then a threshold on its confidence) or ``classifier_pairs``
    (the same over the evidence and its pairwise products); ``max_r1_loss``
    bounds the share of in-KB mentions linked right that the threshold may turn to NIL. With ``e2e``,
    the threshold on the pipeline's own NIL confidence with the best strict end-to-end F1 (module doc;
    its NIL strategy is kept unless ``nil`` names a classifier, fitted to the strict hits;
    ``max_r1_loss`` does not apply). ``linker_name``: the pel_linker calibrated, in a pipeline with one per KB
    (default: the first), on the gold mentions of its labels (a corpus with none is refused)."""
    if nil not in NIL_STRATEGIES:
        raise ValueError(f"unknown NIL strategy {nil!r}; choose one of {', '.join(NIL_STRATEGIES)}")
    check_calibrate_options(output, plot, max_r1_loss)
    nlp = spacy.load(pipeline)
    name, linker = find_linker(nlp, linker_name)
    check_discovery_settings(nlp, name, nil)
    gold_docs = read_docbin(nlp, corpus)
    if docs:
        gold_docs = gold_docs[docs[0] : docs[1]]
    require_linked_gold(corpus, gold_docs, linker.mentions, name, "calibrate")
    gold = [g for doc in gold_docs for g in doc_gold_mentions(doc, linker.mentions)]
    linker.ensure_loaded()
    if e2e:
        return calibrate_e2e(nlp, name, linker, gold_docs, corpus, output, plot, nil=nil, pipeline=pipeline)
    linkable, _, skipped = linkable_mentions(gold, linker.index.lookup)  # alternative ids resolve, as in evaluate
    if not skipped["nil"]:
        return _save_uncalibrated(nlp, name, linker, len(gold), corpus, pipeline, output, plot)
    # NIL mentions alone (another KB's ids for the rest) would fit a threshold that costs nothing: all NIL
    check_linkable(str(corpus), len(linkable), skipped, len(linker.index))
    if nil != "top_score":  # a classifier: the evidence's type feature needs the label → types map first
        linker.nil = ClassifierNil({}, 0.0, label_types(gold_docs, linker.index))
    # the evidence as the pipeline decides on it: its own top_k candidates (the rules re-score what they get)
    rows, _ = mention_table(linker, gold_docs, progress=True, deep=0)
    is_nil = np.array([row[0] == [NIL] for row in rows])
    in_kb = np.array([row[0] != [NIL] and any(g in linker.index.row for g in row[0]) for row in rows])
    correct = np.array([row[1][0] in row[0] for row in rows])
    confidence = np.array([row[3] for row in rows])
    summary: dict = {"calibrated": True, "linker": name}
    if nil != "top_score":
        features = np.stack([row[4] for row in rows])
        fit = in_kb | is_nil  # gold ids the KB lacks are neither
        linker.nil = fit_classifier(features[fit], is_nil[fit], linker.nil.label_types, pairs=nil == "classifier_pairs")
        confidence = linker.nil(features)
        nlp.get_pipe_config(name)["nil"] = linker.nil.as_config()
        summary["classifier"] = linker.nil.as_config()
    span = threshold_range(linker.nil, linker.rules.values(), linker.index.metric)  # a classifier's: a probability
    curve = nil_curve(confidence, is_nil, correct, max_r1_loss, in_kb=in_kb, upper=1.0 if span is None else span[1])
    # settings live in the config: this writes the threshold into config.cfg, which spacy.load reads
    configure_linker(nlp, name, threshold=curve["threshold"])
    summary.update({k: v for k, v in curve.items() if k != "points"} | {"mentions": len(rows), "nil_mentions": int(is_nil.sum())})
    save_calibrated(nlp, name, pipeline, output, {**summary, "points": curve["points"]})
    if plot:
        plot_curve(curve, plot)
    return summary
