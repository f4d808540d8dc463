"""Entity discovery by clustering (SPEC section 3; the arborescence training positives are in
:mod:`spacy_pel.training.arborescence`).

* :func:`cluster` -- inference by clustering: a graph of each mention's ``k`` nearest mentions and
  its nearest entity, merged strongest edge first while no component holds two entities. A mention
  takes its component's entity; components without one are newly discovered entities.
* :func:`~.nil_ids.nil_cluster_ids` -- stable ``NIL:<n>`` ids for those components (:mod:`.nil_ids`).
* :func:`discover` -- all of it over a batch of docs with a ``pel_linker``'s encoder (clustering
  inference, or the linker's own decisions with its NIL mentions clustered); writes the ids to the spans.
* :func:`cluster_scores` -- adjusted Rand index and normalised mutual information (numpy only).

Command line (gold-span corpus in, linked/discovered corpus out, counts JSON on stdout)::

    python -m spacy_pel.discovery CORPUS.spacy OUTPUT.spacy --kb KB_DIR [--k 10] [--threshold T]
"""
from __future__ import annotations

import math
from typing import Callable, Dict, Hashable, List, Optional, Sequence, Tuple, Union

import numpy as np
from spacy.language import Language
from spacy.tokens import Doc, Span

from ..corpora import ID_SEP, NIL, gold_ids, gold_spans
from ..pipeline.linker import PELLinker, find_linker
from ..pipeline.linking_mode import check_mode_settings, linking_mode
from ..pipeline.mentions import DocSpans, doc_spans, spans_at
from ..pipeline.nil import TopScoreNil
from ..pipeline.span_data import CANDIDATES_ATTR, CONFIDENCE_ATTR
from ..retrieval.index import EntityIndex
from ..retrieval.search import FlatSearch
from .evidence import agreeing_evidence
from .nil_ids import nil_cluster_ids

DISCOVERED_KEY = "pel_discovered"  # span group the CLI clusters (all gold spans, overlaps included)
# β of discover(), pel_discovery and the discover CLI: tuned on BC5CDR dev (benchmarks/discovery.md);
# cluster() itself keeps arboEL's 0
MENTION_MARGIN = 0.3

Entities = Union[EntityIndex, Tuple[np.ndarray, Sequence[str]]]


# ---------------------------------------------------------------- inference by clustering
def mention_knn_edges(mention_vecs: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Undirected edges (u < v, similarity) from each mention to its ``k`` nearest other mentions by
    inner product (exact search: a torch product and top-k); a pair found from both ends is kept once, at its higher score."""
    m = len(mention_vecs)
    if m < 2 or k < 1:
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros(0, np.float32)
    sims, nbrs = FlatSearch.from_array(mention_vecs, "fp32").search(mention_vecs, min(k + 1, m))
    rows = np.repeat(np.arange(m), nbrs.shape[1]).reshape(nbrs.shape)
    keep = nbrs != rows  # itself need not come first when vectors repeat
    keep &= np.cumsum(keep, axis=1) <= k
    u, v, w = rows[keep], nbrs[keep].astype(np.int64), sims[keep]
    u, v = np.minimum(u, v), np.maximum(u, v)
    key = u * m + v
    order = np.lexsort((-w, key))  # by pair, best score first
    first = np.r_[True, key[order][1:] != key[order][:-1]]
    order = order[first]
    return u[order], v[order], w[order]


def nearest_entities(mention_vecs: np.ndarray, entities: Entities) -> Tuple[np.ndarray, List[Optional[str]]]:
    """Each mention's nearest entity: (similarity [M], its id or None when there are no entities)."""
    m = len(mention_vecs)
    if isinstance(entities, EntityIndex):
        scores, rows = entities.search(mention_vecs, 1)
        ids = entities.entities.ids
    else:
        vectors, ids = entities
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if len(vectors) != len(ids):
            raise ValueError(f"{len(ids)} entity ids for {len(vectors)} entity vectors")
        if len(ids) == 0 or m == 0:
            return np.zeros(m, np.float32), [None] * m
        scores, rows = FlatSearch.from_array(vectors, "fp32").search(mention_vecs, 1)
    return scores[:, 0], [ids[r] if r >= 0 else None for r in rows[:, 0]]


def cluster(
    mention_vecs: np.ndarray,
    entities: Entities,
    k: int = 10,
    threshold: Optional[float] = None,
    mention_threshold: Optional[float] = None,
    mention_margin: float = 0.0,
    nearest: Optional[Tuple[np.ndarray, Sequence[Optional[str]]]] = None,
) -> Tuple[List[Optional[str]], np.ndarray]:
    """Cluster mentions with the entities: (entity id of each mention's component or None,
    component number of each mention, numbered by first mention).

    ``entities`` is an :class:`EntityIndex` or ``(vectors [E, d], ids)``. Similarity is the inner
    product (the encoder L2-normalises vectors for cosine). The graph (SPEC 3, ArboEL A.2) joins
    each mention to its ``k`` nearest other mentions and to its single nearest entity; edges below
    ``threshold`` (λ; ``mention_threshold`` for mention–mention edges, default ``threshold``) are
    removed first.

    The constraint "at most one entity per component" is enforced by single-linkage agglomeration
    (Kruskal) under a cannot-link constraint: edges are taken by decreasing similarity (ties: lower
    node numbers first) and an edge is dropped exactly when its two ends are, at its turn, already
    tied by stronger edges to two different entities. This equals taking the maximum-similarity
    spanning forest of the graph and cutting, weakest first, the edges that lie on a path between
    two entities until no component holds two (the test suite checks this against a networkx
    reference). Unlike a global reverse-delete that would also cut weak edges separating no
    entities, a mention is never orphaned by an edge it did not need to lose; whether a loosely
    tied mention should rather start a NIL cluster is what ``threshold`` decides. Without a
    threshold every mention keeps its nearest-entity edge unless it is refused, so every component
    ends with an entity and nothing is discovered.

    ``mention_margin`` (β) is subtracted from mention–mention similarities when edges are ordered
    (thresholds apply to the raw similarities). ArboEL trains both affinities on one scale; with a
    frozen entity tower they are not (mention–mention similarities run far higher than
    mention–entity ones), and with β = 0 the mentions merge with each other before they reach their
    entities, so one entity takes a whole region. β makes a mention–mention edge outrank an entity
    edge only when it is that much stronger; β = ``inf`` puts every entity edge first (independent
    linking above λ, with mentions below λ joining their nearest mentions' clusters).
    """
    check_floors(threshold, mention_threshold, mention_margin)
    vecs = np.ascontiguousarray(mention_vecs, dtype=np.float32)
    m = len(vecs)
    if m == 0:
        return [], np.zeros(0, np.int64)
    mention_threshold = threshold if mention_threshold is None else mention_threshold
    u, v, w = mention_knn_edges(vecs, k)
    if mention_threshold is not None:
        u, v, w = u[w >= mention_threshold], v[w >= mention_threshold], w[w >= mention_threshold]
    ent_scores, ent_ids = nearest_entities(vecs, entities) if nearest is None else nearest
    if len(ent_scores) != m or len(ent_ids) != m:
        raise ValueError(f"nearest entities given for {len(ent_scores)} mentions, not {m}")
    linked = np.array([i is not None for i in ent_ids], dtype=bool)
    if threshold is not None:
        linked &= ent_scores >= threshold
    slot_ids = sorted({ent_ids[i] for i in np.flatnonzero(linked)})  # one node per entity, after the mentions
    slot = {e: m + s for s, e in enumerate(slot_ids)}
    eu = np.flatnonzero(linked).astype(np.int64)
    ev = np.array([slot[ent_ids[i]] for i in eu], dtype=np.int64)
    u, v = np.concatenate([u, eu]), np.concatenate([v, ev])
    w = np.concatenate([w.astype(np.float64) - mention_margin, ent_scores[eu].astype(np.float64)])
    order = np.lexsort((v, u, -w))
    roots = _constrained_union(m + len(slot_ids), m, u[order].tolist(), v[order].tolist())
    entity_of_root = {r: slot_ids[n - m] for n, r in enumerate(roots[m:], start=m)}
    entity_for_mention = [entity_of_root.get(r) for r in roots[:m]]
    _, first, labels = np.unique(roots[:m], return_index=True, return_inverse=True)
    renumber = np.argsort(np.argsort(first))  # components numbered in order of their first mention
    return entity_for_mention, renumber[labels.reshape(-1)].astype(np.int64)


def check_floors(threshold: Optional[float], mention_threshold: Optional[float], mention_margin: float) -> None:
    """Refuse (``ValueError``) a NaN floor or margin, which fails every comparison (every edge dropped: every
    mention its own NIL cluster), and a negative margin. ``±inf`` floors and ``inf`` margin keep their meanings."""
    for name, value in (("threshold", threshold), ("mention_threshold", mention_threshold), ("mention_margin", mention_margin)):
        if value is not None and math.isnan(value):
            raise ValueError(f"{name} must be a number, not NaN")
    if mention_margin < 0:
        raise ValueError(f"mention_margin must be at least 0, not {mention_margin}")


def _constrained_union(n_nodes: int, n_mentions: int, us: List[int], vs: List[int]) -> List[int]:
    """Union-find over the edges in the order given, refusing any union of two components that
    both hold an entity node (nodes ≥ ``n_mentions``); returns each node's root."""
    parent = list(range(n_nodes))
    has_entity = [i >= n_mentions for i in range(n_nodes)]

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in zip(us, vs):
        ra, rb = find(a), find(b)
        if ra == rb or (has_entity[ra] and has_entity[rb]):
            continue
        parent[ra] = rb
        has_entity[rb] = has_entity[rb] or has_entity[ra]
    return [find(i) for i in range(n_nodes)]


# ---------------------------------------------------------------- over docs
def _linker(nlp_or_linker: Union[Language, PELLinker]) -> PELLinker:
    return find_linker(nlp_or_linker)[1] if isinstance(nlp_or_linker, Language) else nlp_or_linker


def linker_decisions(linker: PELLinker, docs: Sequence[Doc], spans: Sequence[list]) -> List[Optional[str]]:
    """The linker's own decision for every mention (candidate rules, NIL strategy and threshold), linked
    afresh: its entity id, or None for NIL."""
    linked = linker.candidates(docs, spans)
    decided = [linker.decide(r, c) for one in linked for r, c in zip(one.rows, one.confidence)]
    return [None if i == linker.cfg.nil_label else i for i in decided]


def nil_clusters(
    linker: PELLinker, docs: Sequence[Doc], spans: Sequence[list], entity_for_mention: Sequence[Optional[str]], k: int = 10,
    mention_threshold: Optional[float] = None,
) -> np.ndarray:
    """Component numbers for mentions already decided (``entity_for_mention``, None: NIL): each linked
    mention its own component, and the NIL mentions clustered among themselves only: their ``k`` nearest
    NIL mentions joined when at least ``mention_threshold`` similar (:func:`cluster` with no entities)."""
    n = len(entity_for_mention)
    nil = [i for i, e in enumerate(entity_for_mention) if e is None]
    components = np.arange(n, dtype=np.int64) + n  # linked: their own component
    if nil:
        vectors = linker.mention_vectors(docs, spans_at(spans, nil))
        _, nil_components = cluster(vectors, (np.zeros((0, vectors.shape[1]), np.float32), []), k,
                                    mention_threshold=mention_threshold)
        components[nil] = nil_components
    return components


def cluster_inference(
    linker: PELLinker, docs: Sequence[Doc], spans: Sequence[list], k: int = 10, threshold: Optional[float] = None,
    mention_threshold: Optional[float] = None, mention_margin: float = MENTION_MARGIN,
) -> Tuple[List[Optional[str]], np.ndarray, np.ndarray]:
    """Clustering inference over the mentions: what :func:`cluster` returns with the linker's encoder and
    entity index (``threshold`` default: the linker's NIL threshold), and the mention vectors it used."""
    threshold = linker.threshold if threshold is None else threshold
    vectors = linker.mention_vectors(docs, spans) if any(spans) else np.zeros((0, 1), np.float32)
    return (*cluster(vectors, linker.index, k, threshold, mention_threshold, mention_margin), vectors)


def resolve_linking(linker: PELLinker, linking: str, threshold: Optional[float] = None) -> str:
    """``linking`` resolved for ``linker`` (:func:`~spacy_pel.pipeline.linking_mode.linking_mode`): ``"auto"`` →
    ``"cluster"`` when its NIL confidence is its best score and it has no candidate rules, else ``"pipeline"``
    (clustering inference links by the mention vectors alone, so it would overrule what the rules decided);
    ``"cluster"`` with a NIL classifier needs an explicit ``threshold`` (``ValueError``)."""
    return linking_mode(linking, threshold, score_confidence=isinstance(linker.nil, TopScoreNil), rules=bool(linker.rules),
                        nil_threshold=linker.threshold, linker=linker.name)


def check_linking(linker: PELLinker, linking: str, threshold: Optional[float] = None,
                  mention_threshold: Optional[float] = None, mention_margin: float = MENTION_MARGIN) -> str:
    """``linking`` resolved (:func:`resolve_linking`) after the settings are checked: no NaN floor
    (:func:`check_floors`), no ``threshold`` for ``pipeline`` (``ValueError``)."""
    check_floors(threshold, mention_threshold, mention_margin)
    return check_mode_settings(resolve_linking(linker, linking, threshold), threshold)


def mention_keys(docs: Sequence[Doc], spans: Sequence[list]) -> List[Tuple[int, int, int, int]]:
    """Each mention's (doc index, start char, end char, label): unique and sortable (:func:`nil_cluster_ids`)."""
    return [(d, doc[a].idx, doc[b - 1].idx + len(doc[b - 1]), label)
            for d, (doc, found) in enumerate(zip(docs, spans)) for a, b, label in found]


def discovery_counts(entity_for_mention: Sequence[Optional[str]], components: np.ndarray) -> Dict[str, int]:
    """The counts ``mentions``, ``linked``, ``nil_clusters`` and ``nil_mentions``."""
    nil = [c for c, e in zip(components, entity_for_mention) if e is None]
    return {"mentions": len(entity_for_mention), "linked": len(entity_for_mention) - len(nil),
            "nil_clusters": len(set(nil)), "nil_mentions": len(nil)}


def discover(
    nlp_or_linker: Union[Language, PELLinker],
    docs: Sequence[Doc],
    k: int = 10,
    spans_key: Optional[str] = None,
    threshold: Optional[float] = None,
    mention_threshold: Optional[float] = None,
    mention_margin: float = MENTION_MARGIN,
    linking: str = "auto",
    first_nil: int = 0,
) -> Dict[str, int]:
    """Link and discover over all the spans of ``docs`` (``doc.ents``, or ``doc.spans[spans_key]``)
    together, then set each span's ``kb_id_`` to its entity's id or its ``NIL:<n>`` cluster id (fresh
    spans replace the old; with ``cluster``, a linker's candidates and confidence on a span made to agree with
    its new id, as ``pel_discovery`` does: :func:`~.evidence.agreeing_evidence`). ``linking`` (``"auto"``: the first where the linker's NIL confidence is its best
    score and it has no candidate rules, else the second; :func:`resolve_linking`):

    * ``cluster`` — clustering inference: mention vectors from the ``pel_linker``'s encoder and
      :func:`cluster` with ``threshold`` (default: the linker's NIL threshold; ``-inf`` for none),
      ``mention_threshold`` and ``mention_margin`` (:func:`cluster_inference`; the vectors alone: no
      candidate rules);
    * ``pipeline`` — the linker links every mention as it would alone (its rules and NIL decision),
      and only the mentions it calls NIL are clustered, among themselves, with ``mention_threshold``
      (:func:`linker_decisions`, :func:`nil_clusters`); ``mention_margin`` has no entity edges to weigh
      against and is not used, and a ``threshold`` is refused (``ValueError``), as are NaN floors
      (:func:`check_linking`).

    The spans are linked afresh (docs the linker has not linked: a corpus's gold mentions); after the
    linker in a pipeline, ``pel_discovery`` keeps the decisions its spans carry (:mod:`.component`).
    The NIL clusters are numbered from ``first_nil`` (:func:`~.nil_ids.next_nil_number` of the ids other
    mentions of the batch hold: another linker's clusters). Returns the counts ``mentions``, ``linked``,
    ``nil_clusters`` and ``nil_mentions``.
    """
    linker = _linker(nlp_or_linker)
    linking = check_linking(linker, linking, threshold, mention_threshold, mention_margin)
    linker.ensure_loaded()
    docs = list(docs)
    held = [list(doc_spans(doc, spans_key)) for doc in docs]
    spans = [[(s.start, s.end, s.label) for s in doc_held] for doc_held in held]
    evidence = [(s._.get(CANDIDATES_ATTR), s._.get(CONFIDENCE_ATTR)) for doc_held in held for s in doc_held]
    keys = mention_keys(docs, spans)
    if linking == "pipeline":  # the linker's own decisions, and its NIL mentions clustered among themselves only
        entity_for_mention = linker_decisions(linker, docs, spans)
        components = nil_clusters(linker, docs, spans, entity_for_mention, k, mention_threshold)
    else:
        entity_for_mention, components, vectors = cluster_inference(linker, docs, spans, k, threshold, mention_threshold,
                                                                    mention_margin)
        evidence = [agreeing_evidence(linker, e, v, *ev) if ev[0] else ev
                    for e, v, ev in zip(entity_for_mention, vectors, evidence)]
    ids = iter(nil_cluster_ids(components, entity_for_mention, keys, first_nil))
    kept = iter(evidence)
    source = DocSpans(spans_key)
    for doc, found in zip(docs, spans):  # as the linker writes: the spans' ids and the group's attrs kept
        source.write(doc, [Span(doc, a, b, label=label, kb_id=next(ids)) for a, b, label in found])
        for span in source.spans(doc) if found else ():  # a linker's evidence on the final spans
            candidates, confidence = next(kept)
            if candidates is not None or confidence is not None:
                span._.set(CANDIDATES_ATTR, candidates)
                span._.set(CONFIDENCE_ATTR, confidence)
    return discovery_counts(entity_for_mention, components)


# ---------------------------------------------------------------- cluster quality
def _codes(labels: Sequence[Hashable]) -> np.ndarray:
    seen: Dict[Hashable, int] = {}
    return np.array([seen.setdefault(x, len(seen)) for x in labels], dtype=np.int64)


def _pairs(x: np.ndarray) -> float:
    return float((x * (x - 1) / 2).sum())


def cluster_scores(true_labels: Sequence[Hashable], predicted_labels: Sequence[Hashable]) -> Dict[str, float]:
    """Adjusted Rand index and normalised mutual information (arithmetic-mean normalisation, as
    scikit-learn's defaults) of two labellings of the same items, from their contingency table.
    Identical trivial partitions (one cluster, or all singletons) score 1.0."""
    if len(true_labels) != len(predicted_labels):
        raise ValueError(f"{len(true_labels)} true labels but {len(predicted_labels)} predicted ones")
    t, p = _codes(true_labels), _codes(predicted_labels)
    n = len(t)
    if n == 0:
        return {"ari": 1.0, "nmi": 1.0}
    table = np.zeros((t.max() + 1, p.max() + 1), dtype=np.float64)
    np.add.at(table, (t, p), 1)
    a, b = table.sum(axis=1), table.sum(axis=0)
    index, sum_a, sum_b, total = _pairs(table), _pairs(a), _pairs(b), n * (n - 1) / 2
    expected = sum_a * sum_b / total if total else 0.0
    denominator = (sum_a + sum_b) / 2 - expected
    ari = (index - expected) / denominator if denominator else 1.0

    def entropy(counts: np.ndarray) -> float:
        q = counts[counts > 0] / n
        return float(-(q * np.log(q)).sum())

    h_t, h_p = entropy(a), entropy(b)
    nz = table > 0
    mi = float((table[nz] / n * np.log(table[nz] * n / np.outer(a, b)[nz])).sum())
    if h_t == 0 and h_p == 0:
        nmi = 1.0
    else:
        nmi = mi / ((h_t + h_p) / 2)
    return {"ari": round(float(ari), 6), "nmi": round(max(0.0, min(1.0, nmi)), 6)}


def gold_cluster_scores(docs: Sequence[Doc], spans_key: str = DISCOVERED_KEY,
                        canonical: Optional[Callable[[str], str]] = None) -> Optional[Dict[str, float]]:
    """ARI/NMI of the predicted ids (``doc.spans[spans_key]``) against the gold ids of the same
    spans, over the mentions with a gold id other than NIL (a NIL mention's identity is unknown).
    ``canonical`` (the linker's ``index.canonical``) maps a gold alternative id, and each id of a composite
    one, to its entity's primary id: ``ALT1`` and ``D1`` are then one true entity, as elsewhere."""
    same = canonical or (lambda i: i)
    true, pred = [], []
    for doc in docs:
        gold = {(s.start, s.end, s.label): s.kb_id_ for s in gold_spans(doc)}
        for span in doc_spans(doc, spans_key):
            g = gold.get((span.start, span.end, span.label), "")
            if g and g != NIL:
                true.append(ID_SEP.join(sorted({same(i) for i in gold_ids(g)})) if canonical else g)
                pred.append(span.kb_id_)
    return {**cluster_scores(true, pred), "mentions": len(true)} if true else None
