"""``pel_linker.score``: what ``nlp.evaluate``, ``spacy evaluate`` and ``spacy train`` report.

spaCy's ``Language.evaluate`` runs the pipeline on the predicted docs, then asks each component for
its scores. A linker-only pipeline has no entities there, so nothing would be linked or scored. With
``use_gold_ents`` (the default, as spaCy's own ``entity_linker``) the linker scores new examples whose
predicted docs hold the reference's tokens and mentions, linked by the linker itself as ``python -m
spacy_pel evaluate`` links them (with its own ``top_k``, then 64 candidates each for recall@k:
:mod:`.depth`; 8 documents at a time): its gold spans
(``corpora.gold_spans``: overlapping ones included) as the span group ``GOLD_KEY`` and its
``doc.ents`` as ``doc.ents``. (The reference's tokens, not the pipeline's: a gold mention that does
not fall on the pipeline's token boundaries is still scored.) Without it the spans the linker linked are
scored where they match gold ones: the predicted docs' entities (an NER's, linked end to end), or its
span group's or its labels' spans (:func:`with_own_spans`).

The scores come from the component's ``scorer`` (``spacy_pel.linker_scorer.v1`` by default:
``Scorer.score_links`` plus recall@k and NIL figures, :mod:`spacy_pel.evaluation.scorer`), called with
the linker's ``nil_label``, KB ids, ``threshold`` and ``top_k``; without one, ``Scorer.score_links``.

One linker per KB (each with ``labels``; with or without gold mentions): spaCy's ``Scorer.score`` asks each
component in turn, with the same examples, and keeps the last one's value of a key. So each such
linker keeps what it scored on those examples (:class:`ScoringPass`: ``nlp.evaluate`` gives each call
new predicted docs; a linker scoring them again starts a new pass), and when others of its pipeline
scored them before it, it returns their figures pooled — every linker's mentions, each in its own KB
and with its own threshold (``others`` of the scorer), in the order of their names, whatever the
order of the components — and each linker's own figures under its name (``chemicals_pel_r1``,
``diseases_nel_micro_f``). The last one thus holds the pipeline's figures, those ``spacy train``
selects on (``nel_micro_f``) and ``spacy evaluate --spans-key nel`` prints. A pipeline with one such
linker gets its figures alone, as before. (With ``per_component`` a linker's dict holds the linkers
scored before it.)
"""
from __future__ import annotations

import weakref
from typing import Any, Dict, Iterable, List, NamedTuple, Sequence

from spacy.scorer import Scorer
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import filter_spans

from ..corpora import GOLD_KEY, NIL, bare_doc
from .depth import deepen
from .mentions import DocSpans, linked_gold

DOCS_PER_STEP = 8  # documents linked at a time, as `python -m spacy_pel evaluate` links them
GOLD_K = 64  # candidates per gold mention, as `python -m spacy_pel evaluate` (its largest R@k)


def with_gold_mentions(linker, examples: Iterable[Example]) -> List[Example]:
    """New examples whose predicted docs are the references' tokens with their mentions, linked by
    ``linker`` (the caller's examples are left as they are). A linker whose mention source links some
    labels only (``labels``: one linker per KB) gets those labels' mentions only, as it links in
    ``nlp(doc)``: the others are another linker's to score."""
    out, todo = [], []
    of_labels = getattr(linker.mentions, "of_labels", lambda spans: spans)
    for eg in examples:
        ref = eg.reference
        doc = bare_doc(ref)
        spans = [(s.start, s.end, s.label) for s in linked_gold(linker.mentions, ref)]
        ents = [(e.start, e.end, e.label) for e in of_labels(list(ref.ents))]
        spans += [e for e in ents if e not in set(spans)]
        out.append(Example(doc, ref))
        todo.append((doc, spans, ents))
    group = DocSpans(GOLD_KEY)
    for i in range(0, len(todo), DOCS_PER_STEP):
        chunk = todo[i : i + DOCS_PER_STEP]
        docs, spans = [d for d, _, _ in chunk], [sp for _, sp, _ in chunk]
        found = linker.candidates(docs, spans)  # what the pipeline links, then deeper candidates for R@k
        if GOLD_K > linker.cfg.top_k:
            found = [deepen(a, b) for a, b in zip(found, linker.candidates(docs, spans, k=GOLD_K))]
        linker.set_annotations(docs, list(zip(spans, found)), target=group)
    for doc, _, ents in todo:
        linked = {(s.start, s.end, s.label): s for s in group.spans(doc)}
        doc.ents = [linked[e] for e in ents]
    return out


class Scored(NamedTuple):
    """What one linker scored in a pass: its predicted docs (one per reference), settings and own scores."""

    docs: List[Doc]
    settings: Dict[str, Any]
    scores: Dict[str, object]


def with_own_spans(linker, examples: List[Example]) -> List[Example]:
    """Without gold ents: the examples as the linker linked them — a linker of a span group, or of some
    labels only, is scored on the spans its mention source links (copies of the predicted docs holding them
    as ``doc.ents``, overlaps left out, and all of them as the span group ``GOLD_KEY``), not on whatever
    ``doc.ents`` holds (a span group's linker scored nothing; one of some labels, the others' mentions too)."""
    source = linker.mentions
    if getattr(source, "spans_key", None) is None and getattr(source, "labels", None) is None:
        return examples
    out = []
    for eg in examples:
        doc = eg.predicted.copy()
        own = list(source.spans(doc))
        doc.ents, doc.spans[GOLD_KEY] = filter_spans(own), own
        out.append(Example(doc, eg.reference))
    return out


class ScoringPass:
    """The linkers of one pipeline (by name) that scored one sequence of examples (their predicted docs)."""

    def __init__(self, docs: Sequence[Doc]):
        self.docs = [weakref.ref(d) for d in docs]  # weak: the pass dies with its docs
        self.linkers: Dict[str, Scored] = {}

    def holds(self, docs: Sequence[Doc]) -> bool:
        """The same predicted docs (not the linker's vocab: a linker added with ``add_pipe(source=…)``
        keeps its source pipeline's ``Vocab`` object)."""
        return len(docs) == len(self.docs) and all(ref() is doc for ref, doc in zip(self.docs, docs))


_PASSES: "weakref.WeakKeyDictionary[Doc, ScoringPass]" = weakref.WeakKeyDictionary()  # by the first predicted doc


def scored_with(linker, docs: List[Doc], scored: Scored) -> Dict[str, Scored]:
    """The linkers that scored the examples of these predicted ``docs`` so far (spaCy's ``Scorer.score``
    gives every component the same examples), this one included as ``scored``."""
    found = _PASSES.get(docs[0])
    if found is None or not found.holds(docs) or linker.name in found.linkers:
        found = _PASSES[docs[0]] = ScoringPass(docs)
    found.linkers[linker.name] = scored
    return found.linkers


def score_linker(linker, examples: Iterable[Example], **kwargs) -> Dict[str, object]:
    """The linker's scores on ``examples`` (see the module doc)."""
    examples = list(examples)
    given = [eg.predicted for eg in examples]
    if linker.cfg.use_gold_ents:
        linker.ensure_loaded()
        examples = with_gold_mentions(linker, examples)
    else:
        examples = with_own_spans(linker, examples)
    if linker.scorer is None:
        return Scorer.score_links(examples, negative_labels=sorted({linker.cfg.nil_label, NIL}))
    kb_ids = linker.index.row if linker.index is not None else None
    k = max(GOLD_K, linker.cfg.top_k) if linker.cfg.use_gold_ents else linker.cfg.top_k  # candidates per mention
    canonical = linker.index.canonical if linker.index is not None else None  # alternative ids → primary
    settings = {"nil_label": linker.cfg.nil_label, "kb_ids": kb_ids, "threshold": linker.cfg.threshold, "top_k": k,
                "canonical": canonical}
    scores = linker.scorer(examples, **{**settings, **kwargs})
    if not (examples and getattr(linker.mentions, "labels", None) is not None):
        return scores
    linkers = scored_with(linker, given, Scored([eg.predicted for eg in examples], settings, scores))
    return scores if len(linkers) == 1 else pooled_scores(linker, linkers, examples, **kwargs)


def pooled_scores(linker, linkers: Dict[str, Scored], examples: List[Example], **kwargs) -> Dict[str, object]:
    """The figures of ``linkers`` (the pass's, ``examples`` its references) pooled by ``linker``'s scorer,
    in the order of their names, and each one's own figures under its name."""
    parts = [([Example(doc, eg.reference) for doc, eg in zip(one.docs, examples)], one.settings)
             for _, one in sorted(linkers.items())]
    pooled = linker.scorer(parts[0][0], **{**parts[0][1], **kwargs}, others=parts[1:])
    return {**pooled, **{f"{name}_{key}": value for name, one in linkers.items() for key, value in one.scores.items()}}
