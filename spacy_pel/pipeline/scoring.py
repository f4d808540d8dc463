"""``pel_linker.score``: what ``nlp.evaluate``, ``spacy evaluate`` and ``spacy train`` report.

spaCy's ``Language.evaluate`` runs the pipeline on the predicted docs, then asks each component for
its scores. A linker-only pipeline has no entities there, so nothing would be linked or scored. With
``use_gold_ents`` (the default, as spaCy's own ``entity_linker``) the linker scores new examples whose
predicted docs hold the reference's tokens and mentions, linked by the linker itself as ``python -m
spacy_pel evaluate`` links them (with its own ``top_k``, then 64 candidates each for recall@k:
:mod:`.depth`; 8 documents at a time): its gold spans
(``corpora.gold_spans``: overlapping ones included) as the span group ``GOLD_KEY`` and its
``doc.ents`` as ``doc.ents``. (The reference's tokens, not the pipeline's: a gold mention that does
not fall on the pipeline's token boundaries is still scored.) Without it the predicted docs are scored as
they are (an NER's entities, linked end to end).

The scores come from the component's ``scorer`` (``spacy_pel.linker_scorer.v1`` by default:
``Scorer.score_links`` plus recall@k and NIL figures, :mod:`spacy_pel.evaluation.scorer`), called with
the linker's ``nil_label``, KB ids, ``threshold`` and ``top_k``; without one, ``Scorer.score_links``.
"""
from __future__ import annotations

from typing import Dict, Iterable, List

from spacy.scorer import Scorer
from spacy.training import Example

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


def score_linker(linker, examples: Iterable[Example], **kwargs) -> Dict[str, object]:
    """The linker's scores on ``examples`` (see the module doc)."""
    examples = list(examples)
    if linker.cfg.use_gold_ents:
        linker.ensure_loaded()
        examples = with_gold_mentions(linker, examples)
    if linker.scorer is None:
        return Scorer.score_links(examples, negative_labels=sorted({linker.cfg.nil_label, NIL}))
    kb_ids = linker.index.row if linker.index is not None else None
    k = max(GOLD_K, linker.cfg.top_k) if linker.cfg.use_gold_ents else linker.cfg.top_k  # candidates per mention
    canonical = linker.index.canonical if linker.index is not None else None  # alternative ids → primary
    settings = {"nil_label": linker.cfg.nil_label, "kb_ids": kb_ids, "threshold": linker.cfg.threshold, "top_k": k,
                "canonical": canonical}
    return linker.scorer(examples, **{**settings, **kwargs})
