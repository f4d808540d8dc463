"""Candidate rules of ``pel_linker``: registered functions that adjust the retrieved candidates.

A rule works in up to two phases, each over the rules in the order written. Before any vector is
computed, a rule with a ``prepare(batch)`` method may rewrite a mention's lookup text, tie it to
another mention (``same_as``) or decide it outright (``decided``: mention → KB row); decided and tied
mentions skip the encoder and the index search, so the transformer runs only on what is still open.
After retrieval every rule is called as ``rule(batch)`` with the vectors and the top-k
``scores``/``rows`` of the :class:`CandidateBatch`, and changes them in place. A decided mention's
candidates are its entity alone, with score :data:`DECIDED_SCORE` (it is never NIL by threshold).
These rules come with this module:

* ``spacy_pel.rules.abbreviations.v1`` — a short form defined in its document (``retinoic acid (RA)``,
  :mod:`.abbreviations`) takes the candidates of a mention of its long form in the same document,
  or else is looked up by its long form in the rules that follow (write it before the alias table);
* ``spacy_pel.rules.alias_table.v1`` — a mention whose normalised text is a KB name or synonym, or a
  surface form of ``aliases`` (a JSON file from ``python -m spacy_pel.aliases``), is linked among
  those entities (:class:`.aliases.AliasTable`); with ``decide_unique`` (the default) a text that
  allows one entity only is decided before encoding — the same id the encoder would pick;
* ``spacy_pel.rules.repeats.v1`` — a mention still open whose label and normalised lookup text are
  those of an earlier open mention of the same document takes that mention's candidates (encoded
  once, in the first one's context; write it after the rules that decide). Not exact: a later
  mention's own context no longer counts (BC5CDR dev R@1 in benchmarks/speed.md);
* ``spacy_pel.rules.spelling_variants.v1`` — a mention still open whose text is no KB name but
  whose British spelling folds (``ae``/``oe`` → ``e``, :mod:`.lexical`) to the folded names of one
  entity only is decided as that entity before encoding;
* ``spacy_pel.rules.undefined_short_forms.v1`` — a mention still open that looks like a short form
  (``OAB``) in a document that never defines it takes the candidates of the one mention of its
  document and label whose text is its Schwartz & Hearst long form (``overactive bladder``;
  :func:`.abbreviations.undefined_short_form_links`); write it after the rules that decide.

More rules live in their own modules: ``spacy_pel.rules.label_types.v1`` (:mod:`.label_types`: candidates
whose KB types do not go with the span's label move down), ``spacy_pel.rules.alias_rows.v1``
(:mod:`.alias_rows`), ``spacy_pel.rules.name_rows.v1`` and ``spacy_pel.rules.rerank.v1``.

A rule of your own is any callable ``rule(batch) -> None`` registered in ``spacy.util.registry.misc``
(a :class:`.config.LinkerPart` if it needs the KB or holds data)::

    @registry.misc("my_rules.no_digits.v1")
    def no_digits():
        def rule(batch):
            for i, text in enumerate(batch.texts):
                if text.isdigit():
                    batch.rows[i] = -1
        return rule

    [components.pel_linker.rules.no_digits]
    @misc = "my_rules.no_digits.v1"
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set

import numpy as np
from spacy.tokens import Doc
from spacy.util import registry

from ..kb import normalize
from ..models.encoder import BiEncoder
from ..retrieval.index import EntityIndex
from .abbreviations import short_form_links, undefined_short_form_links
from .aliases import AliasTable, read_aliases, write_aliases
from .config import LinkerPart
from .lexical import VariantTable

ALIASES_FILE = "aliases.json"
DECIDED_SCORE = 1.0  # the score a rule-decided mention's one candidate carries


@dataclass
class CandidateBatch:
    """The mentions of a batch of docs with their retrieved candidates; rules edit it in place.

    ``spans``: per doc ``(start, end, label)``; ``texts``: one lookup text per mention (flat over the
    docs; the mention's text unless a rule rewrote it); ``vectors``: ``[n, dim]`` mention vectors;
    ``scores``/``rows``: ``[n, k]`` best first (row -1: no entity); ``same_as``: ``{i: j}``, mention
    ``i`` takes mention ``j``'s candidates once every rule has run; ``decided``: ``{i: row}``, mention
    ``i`` is linked to KB row ``row`` by a rule's ``prepare`` (no vector is computed for it);
    ``matched``: mentions whose candidates a rule chose by name after retrieval (the alias table).
    ``vectors``, ``scores`` and ``rows`` are None during ``prepare``; afterwards the rows of decided
    and tied mentions hold zeros / their final candidates.
    """

    docs: Sequence[Doc]
    spans: Sequence[list]
    texts: List[str]
    vectors: Optional[np.ndarray]
    scores: Optional[np.ndarray]
    rows: Optional[np.ndarray]
    index: EntityIndex
    same_as: Dict[int, int] = field(default_factory=dict)
    decided: Dict[int, int] = field(default_factory=dict)
    matched: Set[int] = field(default_factory=set)
    _doc_texts: Optional[List[str]] = field(default=None, repr=False)

    @property
    def doc_texts(self) -> List[str]:
        """Each doc's text ("" for a doc without mentions), made once a batch for all the rules
        (``Doc.text`` joins a Token object per token each time it is read)."""
        if self._doc_texts is None:
            self._doc_texts = [doc.text if sp else "" for doc, sp in zip(self.docs, self.spans)]
        return self._doc_texts

    def open(self, i: int) -> bool:
        """Whether mention ``i`` is still to be encoded and retrieved (neither decided nor tied)."""
        return i not in self.decided and i not in self.same_as

    def finish(self) -> None:
        """Apply ``same_as``, following chains (``i`` → ``j`` → ``k``: ``i`` takes ``k``'s candidates)."""
        for i in self.same_as:
            j = self.root(i)
            self.scores[i], self.rows[i] = self.scores[j], self.rows[j]

    def root(self, i: int) -> int:
        """The mention whose candidates mention ``i`` takes (itself unless tied; a cycle stops where it closes)."""
        seen = {i}
        while i in self.same_as and self.same_as[i] not in seen:
            i = self.same_as[i]
            seen.add(i)
        return i

    def by_rule(self) -> List[bool]:
        """Per mention: whether a rule chose its candidates (decided or matched, itself or the mention it is tied to)."""
        chosen = set(self.decided) | self.matched
        return [self.root(i) in chosen for i in range(len(self.texts))]


class AbbreviationRule:
    """A defined short form is linked as its long form (see the module doc)."""

    def prepare(self, batch: CandidateBatch) -> None:
        lookup, copy_from = short_form_links(batch.docs, batch.spans, batch.texts, batch.doc_texts)
        batch.texts = lookup
        batch.same_as.update(copy_from)

    def __call__(self, batch: CandidateBatch) -> None:
        """Nothing is left to do once the candidates exist (``prepare`` did the work)."""


class AliasRule(LinkerPart):
    """Exact-match alias table over the KB's names (and ``aliases``' surface forms, saved with the pipeline)."""

    data_name = "aliases"

    def __init__(self, aliases: Optional[str] = None, decide_unique: bool = True):
        if aliases is not None and not isinstance(aliases, (str, Path)):
            raise ValueError(f"spacy_pel.rules.alias_table.v1: `aliases` must be a path or null, not {aliases!r}")
        if not isinstance(decide_unique, bool):
            raise ValueError(f"spacy_pel.rules.alias_table.v1: `decide_unique` must be true or false, not {decide_unique!r}")
        self.source = str(aliases) if aliases else None
        self.decide_unique = decide_unique
        self.counts: Optional[Dict[str, Dict[str, int]]] = None
        self.table: Optional[AliasTable] = None

    def setup(self, encoder: BiEncoder, index: EntityIndex) -> None:
        if self.counts is None and self.source:
            self.counts = read_aliases(self.source)
        self.table = AliasTable(index, self.counts)

    def to_disk(self, path: Path) -> bool:
        if self.counts is None:
            return False
        write_aliases(self.counts, path / ALIASES_FILE)
        return True

    def from_disk(self, path: Path) -> bool:
        if not (path / ALIASES_FILE).exists():
            return False
        self.counts = read_aliases(path / ALIASES_FILE)
        return True

    def _table(self) -> AliasTable:
        if self.table is None:
            raise ValueError("the alias table is not set up (the linker does it when it loads its KB)")
        return self.table

    def prepare(self, batch: CandidateBatch) -> None:
        """With ``decide_unique``: a text that allows exactly one entity decides the mention."""
        if not self.decide_unique:
            return
        table = self._table()
        for i, text in enumerate(batch.texts):
            if batch.open(i):
                allowed = table.candidates(text)
                if allowed is not None and len(allowed) == 1:
                    batch.decided[i] = allowed[0]

    def __call__(self, batch: CandidateBatch) -> None:
        open_ = [batch.open(i) for i in range(len(batch.texts))]
        texts = [t if o else "" for t, o in zip(batch.texts, open_)]  # "" matches no name
        batch.scores, batch.rows = self._table().restrict(texts, batch.vectors, batch.scores, batch.rows, found=batch.matched)


class UndefinedShortFormRule:
    """An open mention that looks like a short form takes the candidates of its long form's mention."""

    def prepare(self, batch: CandidateBatch) -> None:
        still_open = [batch.open(i) for i in range(len(batch.texts))]
        batch.same_as.update(undefined_short_form_links(batch.docs, batch.spans, still_open))

    def __call__(self, batch: CandidateBatch) -> None:
        """Nothing to do after retrieval (``finish`` copies the long form's candidates)."""


class RepeatRule:
    """A repeated mention takes the candidates of its first open occurrence in the document."""

    def prepare(self, batch: CandidateBatch) -> None:
        start = 0
        for doc_spans in batch.spans:
            first: Dict[tuple, int] = {}
            for i in range(start, start + len(doc_spans)):
                if batch.open(i):
                    j = first.setdefault((doc_spans[i - start][2], normalize(batch.texts[i])), i)
                    if j != i:
                        batch.same_as[i] = j
            start += len(doc_spans)

    def __call__(self, batch: CandidateBatch) -> None:
        """Nothing to do after retrieval (``finish`` copies the first occurrence's candidates)."""


class VariantRule(LinkerPart):
    """Decides open mentions whose spelling variant names one entity (see the module doc)."""

    data_name = "spelling_variants"

    def __init__(self):
        self.table: Optional[VariantTable] = None
        self.names = None

    def setup(self, encoder: BiEncoder, index: EntityIndex) -> None:
        self.names = index.entities.name_index()
        self.table = VariantTable.from_name_index(self.names)

    def prepare(self, batch: CandidateBatch) -> None:
        if self.table is None:
            raise ValueError("the variant table is not set up (the linker does it when it loads its KB)")
        for i, text in enumerate(batch.texts):
            if batch.open(i) and normalize(text) not in self.names:
                row = self.table.row(text)
                if row is not None:
                    batch.decided[i] = row

    def __call__(self, batch: CandidateBatch) -> None:
        """Nothing to do after retrieval (decided mentions already hold their entity)."""


@registry.misc("spacy_pel.rules.abbreviations.v1")
def abbreviation_rule() -> AbbreviationRule:
    """A short form defined in its document is linked as its long form."""
    return AbbreviationRule()


@registry.misc("spacy_pel.rules.alias_table.v1")
def alias_table_rule(aliases: Optional[str] = None, decide_unique: bool = True) -> AliasRule:
    """Exact-match alias table: KB names and synonyms, plus the surface forms of ``aliases``;
    ``decide_unique``: a text allowing one entity only is linked without running the encoder."""
    return AliasRule(aliases, decide_unique)


@registry.misc("spacy_pel.rules.undefined_short_forms.v1")
def undefined_short_form_rule() -> UndefinedShortFormRule:
    """A mention still open that looks like a short form (``OAB``) takes the candidates of the one
    mention of its document and label whose text is its long form (``overactive bladder``) when the
    document never defines it. Put it after the rules that decide."""
    return UndefinedShortFormRule()


@registry.misc("spacy_pel.rules.repeats.v1")
def repeat_rule() -> RepeatRule:
    """A mention repeating an earlier open mention of its document (same label and normalised text)
    is encoded once: it takes that mention's candidates."""
    return RepeatRule()


@registry.misc("spacy_pel.rules.spelling_variants.v1")
def spelling_variant_rule() -> VariantRule:
    """A mention whose text is no KB name but whose British spelling (ae/oe → e) folds to the names
    of one entity only is linked to it without running the encoder."""
    return VariantRule()
