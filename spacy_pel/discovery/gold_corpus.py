"""A gold corpus clustered one linker at a time (``python -m spacy_pel discover``).

In a pipeline with one ``pel_linker`` per KB, each linker links the mentions of its own ``labels``
only. :func:`gold_to_cluster` puts the gold mentions one linker links into the span group
:data:`~.cluster.DISCOVERED_KEY` (the gold ids kept in ``pel_gold``) and sets the others aside;
:func:`put_back` returns them to the output once :func:`~.cluster.discover` has clustered the first:

* a mention an earlier ``discover`` run clustered (its output given again, with another ``--linker``)
  keeps that run's id, in the span group and ``doc.ents``, and the new NIL clusters are numbered after its
  ``NIL:<n>`` ids (:func:`~.nil_ids.next_nil_number`): two linkers' clusters never share an id;
* any other mention of another label stays in ``doc.ents`` unlinked (no ``kb_id``), out of the span group
  (which holds the clustered mentions only, what the ARI/NMI report scores).
"""
from __future__ import annotations

from typing import List, NamedTuple, Sequence, Tuple

from spacy.tokens import Doc, Span
from spacy.util import filter_spans

from ..corpora import GOLD_KEY, gold_spans
from ..pipeline.mentions import doc_spans, linked_gold
from .cluster import DISCOVERED_KEY
from .nil_ids import next_nil_number

SpanKey = Tuple[int, int, int]


class SetAside(NamedTuple):
    """One doc's gold mentions the linker does not link: ``clustered`` by an earlier run (their ids kept),
    and the ``unlinked`` rest."""

    clustered: List[Span]
    unlinked: List[Span]


def _key(span: Span) -> SpanKey:
    return span.start, span.end, span.label


def gold_to_cluster(docs: Sequence[Doc], source) -> Tuple[List[SetAside], int]:
    """Per doc: keep its gold ids in ``pel_gold``, put fresh spans (no id) of the gold mentions the mention
    ``source`` links into :data:`~.cluster.DISCOVERED_KEY`, and set the others aside. Returns what was set
    aside and the first NIL number free after the ids an earlier run gave them."""
    aside = []
    for doc in docs:
        gold = list(gold_spans(doc))
        if GOLD_KEY not in doc.spans:
            doc.spans[GOLD_KEY] = gold  # keep the gold ids: doc.ents is overwritten
        own = {_key(s) for s in linked_gold(source, doc)}
        earlier = {_key(s): s for s in doc_spans(doc, DISCOVERED_KEY)}  # an earlier run's output
        others = [s for s in gold if _key(s) not in own]
        aside.append(SetAside([Span(doc, s.start, s.end, label=s.label, kb_id=earlier[_key(s)].kb_id)
                               for s in others if _key(s) in earlier],
                              [Span(doc, s.start, s.end, label=s.label) for s in others if _key(s) not in earlier]))
        doc.spans[DISCOVERED_KEY] = [Span(doc, s.start, s.end, label=s.label) for s in gold if _key(s) in own]
    first = next_nil_number(s.kb_id_ for one in aside for s in one.clustered)
    return aside, first


def put_back(docs: Sequence[Doc], aside: Sequence[SetAside]) -> None:
    """The mentions set aside returned (the module doc): the clustered ones into
    :data:`~.cluster.DISCOVERED_KEY`, and every mention, less overlaps, into ``doc.ents``."""
    for doc, one in zip(docs, aside):
        if one.clustered:
            doc.spans[DISCOVERED_KEY] = sorted([*doc.spans[DISCOVERED_KEY], *one.clustered], key=_key)
        doc.ents = filter_spans([*doc.spans[DISCOVERED_KEY], *one.unlinked])  # a clustered mention first on a tie
