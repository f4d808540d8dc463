"""The ids of newly discovered entities: ``NIL:<n>``, one per cluster of a batch.

* :func:`nil_cluster_ids` -- stable ``NIL:<n>`` ids for the clusters without an entity, numbered from
  ``first``;
* :func:`next_nil_number` -- the first number free after the ``NIL:<n>`` ids other mentions of the
  batch hold already (another linker's clusters: one ``pel_discovery`` per linker, or a ``discover``
  run with another ``--linker``), so that distinct clusters keep distinct ids;
* :func:`ids_held_elsewhere` -- the ids of a batch's spans that are not a mention source's own.
"""
from __future__ import annotations

from typing import Dict, Hashable, Iterable, Iterator, List, Optional, Sequence

from spacy.tokens import Doc

from ..corpora import NIL

NIL_PREFIX = NIL + ":"


def nil_cluster_ids(
    components: Sequence[int], entity_for_mention: Sequence[Optional[str]], mention_keys: Sequence[Hashable],
    first: int = 0,
) -> List[str]:
    """The id of each mention: its entity's, or ``NIL:<n>`` for a component without an entity.

    The entity-less components are numbered ``first``, ``first`` + 1, … in the order of their smallest
    mention key (e.g. ``(doc index, start_char, end_char)``; keys must be sortable, and unique for the ids
    to be fully determined), so the same mentions give the same ids whatever order they come in.
    """
    if not len(components) == len(entity_for_mention) == len(mention_keys):
        raise ValueError("components, entity_for_mention and mention_keys must have one entry per mention")
    smallest: Dict[int, Hashable] = {}
    for comp, ent, key in zip(components, entity_for_mention, mention_keys):
        if ent is None and (int(comp) not in smallest or key < smallest[int(comp)]):
            smallest[int(comp)] = key
    number = {comp: first + n for n, comp in enumerate(sorted(smallest, key=smallest.__getitem__))}
    return [
        ent if ent is not None else f"{NIL_PREFIX}{number[int(c)]}" for c, ent in zip(components, entity_for_mention)
    ]


def nil_number(kb_id: str) -> Optional[int]:
    """``n`` of a ``NIL:<n>`` cluster id, else None (an entity id, ``NIL``, an empty id)."""
    tail = kb_id[len(NIL_PREFIX):] if kb_id.startswith(NIL_PREFIX) else ""
    return int(tail) if tail.isascii() and tail.isdigit() else None


def next_nil_number(kb_ids: Iterable[str]) -> int:
    """The number after the highest ``NIL:<n>`` among ``kb_ids`` (0 when there is none): where new clusters
    of the same batch are numbered from so that they take no id another cluster holds."""
    return max((n + 1 for n in map(nil_number, kb_ids) if n is not None), default=0)


def ids_held_elsewhere(docs: Sequence[Doc], source) -> Iterator[str]:
    """The ``kb_id_`` of every span of ``docs`` (``doc.ents`` and each span group) except the mentions the
    mention ``source`` links (``source.spans(doc)``, in the span group or ``doc.ents`` it reads): those it
    is about to number afresh."""
    key = getattr(source, "spans_key", None)
    for doc in docs:
        own = {(s.start, s.end, s.label) for s in source.spans(doc)}
        for name, spans in [(None, doc.ents), *doc.spans.items()]:  # None: doc.ents, as a source's spans_key
            yield from (s.kb_id_ for s in spans if not (name == key and (s.start, s.end, s.label) in own))
