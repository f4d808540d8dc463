"""Linking the mentions a document is given (a corpus's gold mentions, a PubTator file's annotations)
with a saved pipeline, as ``link``, ``bulk`` and ``visualize`` do.

The given mentions are all in the span group ``pel_gold`` (overlapping ones and repeats included), the
non-overlapping ones in ``doc.ents`` too (:mod:`spacy_pel.corpora`). A linker that links the spans a doc
has (``doc.ents`` or a span group) links ``pel_gold`` instead, so every given mention is linked; in a
pipeline with a component after its last linker that reads or sets the entities (``pel_discovery``) it
links ``doc.ents``, which that component sees (a span-group linker too: a given doc has no such group), except
a ``pel_discovery`` (which works on the linker's mention source) when asked (``discovery_on_given``: every given
mention linked and clustered). The pipeline's own mention finders (NER, span ruler …)
before ``pel_linker`` are left out so they cannot replace the given mentions. A linker with a span
finder finds its own spans: the given ones are not used.
"""
from __future__ import annotations

import copy
from collections import Counter
from contextlib import contextmanager
from typing import Dict, Iterable, Iterator, List, Sequence

from spacy.language import Language
from spacy.tokens import Doc, Span

from ..corpora import GOLD_KEY
from .linker import PELLinker
from .mention_finders import mention_finders
from .mentions import DocSpans

OWN_SOURCE_READERS = ("pel_discovery",)  # factories after a linker that work on its mention source, not doc.ents

def given_source(linker: PELLinker) -> object:
    """Where ``linker`` finds given mentions: every one of them (the span group ``pel_gold``, overlapping
    ones included; those of its ``labels`` only when it has some) when it links the spans a doc has,
    else its own source (a span finder finds its own spans: the given ones are not used)."""
    if reads_doc_spans(linker.mentions):  # the same source (a subclass's own behaviour kept), reading pel_gold
        source = copy.copy(linker.mentions)
        source.spans_key = GOLD_KEY
        return source
    return linker.mentions


def entities_source(source: object) -> object:
    """Where ``source`` links given mentions in a pipeline that links ``doc.ents``: a span group's linker
    (``span_group.v1``) reads ``doc.ents`` instead (the group is not in a given doc), its ``labels`` kept."""
    if reads_doc_spans(source) and source.spans_key is not None:
        source = copy.copy(source)
        source.spans_key = None
    return source


def reads_given(sources: Sequence[object]) -> bool:
    """Whether a linker's mention source may read given spans: any that is no span finder (whose found spans take
    their entity's type, ``label_from_kb``, and ignore the spans a doc has)."""
    return any(not getattr(source, "label_from_kb", False) for source in sources)


def reads_doc_spans(source: object) -> bool:
    """Whether a mention source links the spans a doc has (``ents.v1``, ``span_group.v1`` or a subclass of
    their :class:`.mentions.DocSpans`), rather than finding its own (a span finder) or being another kind."""
    return isinstance(source, DocSpans) and not source.label_from_kb


def entities_after_linkers(nlp: Language, skip: Sequence[str] = ()) -> bool:
    """Does a component after the last ``pel_linker`` (but those made by a factory in ``skip``) say (its
    factory's ``assigns`` / ``requires``) that it reads or sets the entities or span groups?"""
    last = max(i for i, (_, proc) in enumerate(nlp.pipeline) if isinstance(proc, PELLinker))
    for name, _ in nlp.pipeline[last + 1:]:
        meta = nlp.get_pipe_meta(name)
        if meta.factory in skip:
            continue
        if any(a.startswith(("doc.ents", "doc.spans", "token.ent")) for a in (*meta.assigns, *meta.requires)):
            return True
    return False


class GivenMentions:
    """How a loaded pipeline links given mentions (the module doc): its linkers, where each links them
    (``sources``), whether overlapping ones are linked (``links_overlaps``) and the mention finders left out."""

    def __init__(self, nlp: Language, discovery_on_given: bool = False):
        self.nlp = nlp
        _, self.finders = mention_finders(nlp.config)
        self.linkers = [proc for _, proc in nlp.pipeline if isinstance(proc, PELLinker)]
        # a component after the last linker that reads or sets the entities (pel_discovery …) would not see
        # links written to pel_gold: link doc.ents there (the overlapping mentions it cannot hold are not linked)
        # … and a linker whose source is of another kind links what that source gives: overlaps are then counted
        # (pel_discovery works on its linker's source, swapped while linking: with ``discovery_on_given`` on pel_gold)
        skip = OWN_SOURCE_READERS if discovery_on_given else ()
        self.links_overlaps = not entities_after_linkers(nlp, skip) and all(
            reads_doc_spans(linker.mentions) or linker.mentions.label_from_kb for linker in self.linkers)
        self.sources = [given_source(linker) if self.links_overlaps else entities_source(linker.mentions)
                        for linker in self.linkers]

    @contextmanager
    def linking(self) -> Iterator[None]:
        """Each linker links the given mentions (:attr:`sources`) for the time of the block."""
        kept = [linker.mentions for linker in self.linkers]
        try:
            for linker, source in zip(self.linkers, self.sources):
                linker.mentions = source
            yield
        finally:
            for linker, source in zip(self.linkers, kept):
                linker.mentions = source

    def pipe(self, docs: Iterable[Doc], batch_size: int = 64) -> List[Doc]:
        """The docs linked, their given mentions linked (the pipeline's mention finders left out); a doc
        without the group ``pel_gold`` (a DocBin not written by ``convert``) is given its ``doc.ents``, as
        :func:`~spacy_pel.corpora.gold_spans` reads it."""
        docs = [with_gold_group(doc) for doc in docs]
        with self.linking():
            return list(self.nlp.pipe(docs, batch_size=batch_size, disable=self.finders))

    def linked_spans(self, doc: Doc) -> List[Span]:
        """The spans the linkers wrote on ``doc`` linking its given mentions (:func:`spans_written`)."""
        return spans_written(doc, self.sources)


def with_gold_group(doc: Doc) -> Doc:
    """``doc``, given the span group ``pel_gold`` = its ``doc.ents`` when it has no such group."""
    if GOLD_KEY not in doc.spans:
        doc.spans[GOLD_KEY] = list(doc.ents)
    return doc


def spans_written(doc: Doc, sources: Iterable[object]) -> List[Span]:
    """The spans of ``doc`` in the mention ``sources`` the linkers wrote to (one linker per KB: each its own
    spans), in document order; a span two linkers both link is one, a mention given twice (same offsets and
    label) two."""
    spans: Dict[tuple, Span] = {}
    for source in sources:
        repeat: Counter = Counter()
        for s in source.spans(doc):
            key = (s.start_char, s.end_char, s.label_)
            repeat[key] += 1
            spans[(*key, repeat[key])] = s
    return sorted(spans.values(), key=lambda s: (s.start_char, s.end_char))
