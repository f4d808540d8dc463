"""The ``pel_discovery`` pipeline component: clustering inference after ``pel_linker``.

It works on the mentions the linker linked: the spans of the linker's own mention source (its span
group; with ``labels``, those labels only, another linker's mentions left alone), which carry its
decisions (``kb_id_``, ``span._.pel_candidates``, ``span._.pel_confidence``):

* ``pipeline`` keeps those decisions rather than linking again (a span finder's ``span`` evidence for a
  NIL classifier exists only while the linker runs) and clusters the NIL mentions among themselves;
* ``cluster`` links every mention again by clustering inference (the vectors alone). A mention that
  ends with another entity than its first candidate gets that entity first in ``pel_candidates`` (with
  its retrieval score, else its similarity to the mention), and as ``pel_confidence`` that score when
  the linker's confidence is its best score (None for a NIL classifier's probability, which judged
  another candidate). A mention joined to its entity through its nearest mentions keeps its own
  confidence, which can be below the linker's threshold: the graph linked it, not its score.

With one ``pel_discovery`` per linker, each numbers its NIL clusters after the ``NIL:<n>`` ids the others
gave the batch already (:mod:`.nil_ids`): a chemical and a disease cluster never share an id.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from spacy.language import Language
from spacy.tokens import Doc, Span
from spacy.util import minibatch

from ..pipeline.linker import PELLinker, find_linker
from ..pipeline.mentions import spans_at
from ..pipeline.span_data import CANDIDATES_ATTR, CONFIDENCE_ATTR
from .cluster import (
    MENTION_MARGIN,
    check_linking,
    cluster_inference,
    discovery_counts,
    linker_decisions,
    mention_keys,
    nil_clusters,
)
from .evidence import Evidence, agreeing_evidence
from .nil_ids import NIL_PREFIX, ids_held_elsewhere, next_nil_number, nil_cluster_ids


@Language.factory(
    "pel_discovery",
    default_config={"linker": "pel_linker", "k": 10, "threshold": None, "mention_margin": MENTION_MARGIN, "batch_size": 1000,
                    "linking": "auto", "mention_threshold": None},
    assigns=["doc.ents", "token.ent_kb_id", f"span._.{CANDIDATES_ATTR}", f"span._.{CONFIDENCE_ATTR}"],
    requires=["doc.ents"],
)
def make_discovery(
    nlp: Language, name: str, linker: str, k: int, threshold: Optional[float], mention_margin: float, batch_size: int,
    linking: str = "auto", mention_threshold: Optional[float] = None,
):
    """Clustering inference as a pipeline step after ``pel_linker``: ``nlp.pipe`` clusters the
    mentions of each batch of ``batch_size`` docs together (the batch is the corpus). ``linking`` as in
    :func:`~.cluster.discover`: ``auto`` keeps the linker's own decisions and clusters only its NIL
    mentions when it decides NIL with a classifier (a calibrated linker) or applies candidate rules;
    ``mention_margin`` 0.3 is β tuned on BC5CDR dev (0 = arboEL's, which lets mentions merge before they
    reach their entities; ``benchmarks/discovery.md``). ``mention_threshold``: the floor of mention–mention
    edges (``cluster``: default ``threshold``; ``pipeline``: the only floor, the NIL mentions joined to their
    ``k`` nearest however far without it). The settings are checked here (:func:`check_settings`)."""
    check_settings(nlp, linker, k, threshold, mention_margin, batch_size, linking, mention_threshold)
    return Discovery(nlp, name, linker, k, threshold, batch_size, mention_margin, linking, mention_threshold)


def find_discovery_linker(nlp: Language, name: str) -> PELLinker:
    """The pel_linker called ``name`` (``ValueError`` naming the setting when the pipeline has none)."""
    try:
        return find_linker(nlp, name)[1]
    except ValueError as err:
        raise ValueError(f"pel_discovery: `linker` = {name!r}: {err}; pel_discovery goes after the pel_linker whose "
                         "mentions it clusters") from None


def check_settings(nlp: Language, linker: str, k: int, threshold: Optional[float], mention_margin: float, batch_size: int,
                   linking: str, mention_threshold: Optional[float] = None) -> None:
    """Refuse (``ValueError`` naming the setting), when the component is made, what would fail or silently
    do nothing at the first batch (spaCy has checked the types): ``batch_size`` < 1 (``nlp.pipe`` would give
    no document), ``k`` < 0, a NaN floor or a negative margin, an unknown ``linking``, a ``threshold`` the
    linking mode does not use (:func:`~.cluster.check_linking`), and a ``linker`` the pipeline does not have
    (spaCy makes the components in order: the linker is there already)."""
    for setting, value, least in (("batch_size", batch_size, 1), ("k", k, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"pel_discovery: `{setting}` must be an integer of at least {least}, not {value!r}")
    found = find_discovery_linker(nlp, linker)
    try:
        check_linking(found, linking, threshold, mention_threshold, mention_margin)
    except ValueError as err:
        raise ValueError(f"pel_discovery: {err}") from None


class Discovery:
    def __init__(self, nlp: Language, name: str, linker: str, k: int, threshold: Optional[float], batch_size: int,
                 mention_margin: float = MENTION_MARGIN, linking: str = "auto", mention_threshold: Optional[float] = None):
        self.nlp, self.name, self.linker_name = nlp, name, linker
        self.k, self.threshold, self.batch_size, self.mention_margin = k, threshold, batch_size, mention_margin
        self.linking, self.mention_threshold = linking, mention_threshold

    def discover(self, docs: Sequence[Doc]) -> Dict[str, int]:
        """:func:`discover_linked` over ``docs`` with this step's linker and settings; returns its counts."""
        return discover_linked(find_discovery_linker(self.nlp, self.linker_name), docs, self.k, self.threshold,
                               self.mention_margin, self.linking, self.mention_threshold)

    def __call__(self, doc: Doc) -> Doc:
        self.discover([doc])
        return doc

    def pipe(self, stream, batch_size: Optional[int] = None):
        for docs in minibatch(stream, size=self.batch_size):
            self.discover(docs)
            yield from docs


def discover_linked(linker: PELLinker, docs: Sequence[Doc], k: int = 10, threshold: Optional[float] = None,
                    mention_margin: float = MENTION_MARGIN, linking: str = "auto",
                    mention_threshold: Optional[float] = None) -> Dict[str, int]:
    """:func:`~.cluster.discover` over docs that ``linker`` has linked, on the spans of its mention source
    and, with ``pipeline``, with the decisions they carry (the module doc); a span without one (the linker
    did not run on its doc) is linked afresh. The NIL clusters are numbered after the ``NIL:<n>`` ids the
    batch's other spans hold (another linker's ``pel_discovery`` ran before: distinct clusters, distinct
    ids). ``mention_threshold`` as in :func:`~.cluster.discover`. Returns the same counts."""
    linking = check_linking(linker, linking, threshold, mention_threshold, mention_margin)
    linker.ensure_loaded()
    docs = list(docs)
    found = [list(linker.mentions.spans(doc)) for doc in docs]
    spans = [[(s.start, s.end, s.label) for s in doc_found] for doc_found in found]
    flat = [s for doc_found in found for s in doc_found]
    evidence: List[Evidence] = [(s._.get(CANDIDATES_ATTR), s._.get(CONFIDENCE_ATTR)) for s in flat]
    if linking == "pipeline":
        entity_for_mention = own_decisions(linker, docs, spans, flat)
        components = nil_clusters(linker, docs, spans, entity_for_mention, k, mention_threshold)
    else:
        entity_for_mention, components, vectors = cluster_inference(linker, docs, spans, k, threshold, mention_threshold, mention_margin)
        evidence = [agreeing_evidence(linker, e, v, *ev) for e, v, ev in zip(entity_for_mention, vectors, evidence)]
    first = next_nil_number(ids_held_elsewhere(docs, linker.mentions))  # after another linker's clusters
    ids = iter(nil_cluster_ids(components, entity_for_mention, mention_keys(docs, spans), first))
    kept = iter(evidence)
    for doc, doc_found in zip(docs, found):
        new = [Span(doc, s.start, s.end, label=s.label, kb_id=next(ids)) for s in doc_found]
        if not linker.mentions.write(doc, new):
            continue
        for span, (candidates, confidence) in zip(linker.mentions.spans(doc), kept):  # on the final spans, as the linker
            span._.set(CANDIDATES_ATTR, candidates)
            span._.set(CONFIDENCE_ATTR, confidence)
    return discovery_counts(entity_for_mention, components)


def own_decisions(linker: PELLinker, docs: Sequence[Doc], spans: Sequence[list],
                  flat: Sequence[Span]) -> List[Optional[str]]:
    """Each mention's entity as the linker wrote it in ``kb_id_`` (None: NIL, or an earlier NIL cluster);
    the mentions without a ``kb_id_`` linked afresh (:func:`~.cluster.linker_decisions`)."""
    nil = linker.cfg.nil_label
    decided = [None if s.kb_id_ in ("", nil) or s.kb_id_.startswith(NIL_PREFIX) else s.kb_id_ for s in flat]
    fresh = [n for n, s in enumerate(flat) if not s.kb_id_]
    if fresh:
        for n, entity in zip(fresh, linker_decisions(linker, docs, spans_at(spans, fresh))):
            decided[n] = entity
    return decided
