"""``pel_linker.score``: what ``nlp.evaluate``, ``spacy evaluate`` and ``spacy train`` report.

spaCy's ``Language.evaluate`` runs the pipeline on the predicted docs, then asks each component for
its scores. A linker-only pipeline has no entities there, so nothing would be linked or scored. With
``use_gold_ents`` (the default, as spaCy's own ``entity_linker``) the linker scores copies of the
examples whose predicted docs hold the reference's mentions (aligned to the predicted tokens), linked
by the linker itself, as ``python -m spacy_pel evaluate`` links them (64 candidates each, 8 documents at
a time): its gold spans (``corpora.gold_spans``: overlapping ones included) as the span group
``GOLD_KEY`` and its ``doc.ents`` as ``doc.ents``. Without it the predicted docs are scored as
they are (an NER's entities, linked end to end).

The scores come from the component's ``scorer`` (``spacy_pel.linker_scorer.v1`` by default:
``Scorer.score_links`` plus recall@k and NIL figures, :mod:`spacy_pel.evaluation.scorer`), called with
the linker's ``nil_label``, KB ids, ``threshold`` and ``top_k``; without one, ``Scorer.score_links``.
"""
from __future__ import annotations

from typing import Dict, Iterable, List

from spacy.scorer import Scorer
from spacy.training import Example

from ..corpora import GOLD_KEY, gold_spans
from .mentions import DocSpans

DOCS_PER_STEP = 8  # documents linked at a time, as `python -m spacy_pel evaluate` links them
GOLD_K = 64  # candidates per gold mention, as `python -m spacy_pel evaluate` (its largest R@k)


def with_gold_mentions(linker, examples: Iterable[Example]) -> List[Example]:
    """Copies of ``examples`` whose predicted docs hold the reference's mentions, linked by ``linker``."""
    copies = [eg.copy() for eg in examples]
    todo = []
    for eg in copies:
        spans = list(eg.get_aligned_spans_y2x(gold_spans(eg.reference), allow_overlap=True))
        ents = list(eg.get_aligned_spans_y2x(eg.reference.ents))
        known = {(s.start, s.end, s.label) for s in spans}
        spans += [e for e in ents if (e.start, e.end, e.label) not in known]
        todo.append((eg.predicted, [(s.start, s.end, s.label) for s in spans], ents))
    group = DocSpans(GOLD_KEY)
    for i in range(0, len(todo), DOCS_PER_STEP):
        chunk = todo[i : i + DOCS_PER_STEP]
        docs, spans = [d for d, _, _ in chunk], [sp for _, sp, _ in chunk]
        found = linker.candidates(docs, spans, k=max(GOLD_K, linker.cfg.top_k))
        linker.set_annotations(docs, [(sp, s, r) for sp, (s, r) in zip(spans, found)], target=group)
    for doc, _, ents in todo:
        linked = {(s.start, s.end, s.label): s for s in group.spans(doc)}
        doc.ents = [linked[(e.start, e.end, e.label)] for e in ents]
    return copies


def score_linker(linker, examples: Iterable[Example], **kwargs) -> Dict[str, object]:
    """The linker's scores on ``examples`` (see the module doc)."""
    examples = list(examples)
    if linker.cfg.use_gold_ents:
        linker.ensure_loaded()
        examples = with_gold_mentions(linker, examples)
    if linker.scorer is None:
        return Scorer.score_links(examples, negative_labels=[linker.cfg.nil_label])
    kb_ids = linker.index.row if linker.index is not None else None
    k = max(GOLD_K, linker.cfg.top_k) if linker.cfg.use_gold_ents else linker.cfg.top_k  # candidates per mention
    settings = {"nil_label": linker.cfg.nil_label, "kb_ids": kb_ids, "threshold": linker.cfg.threshold, "top_k": k}
    return linker.scorer(examples, **{**settings, **kwargs})
