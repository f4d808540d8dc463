"""Silver mentions: a KB's unambiguous names found in raw text, kept as linked mentions in their context.

Self-alignment on the KB's synonyms (``adapt``) teaches an encoder names, but only names on their own:
an encoder adapted that way links a mention's bare text better than base MiniLM does, and a mention in
its sentence worse, for it never saw a sentence (``benchmarks/adapt_alone.md``). A user with a KB and no
annotated text usually has unannotated text of the domain (PubMed abstracts). Distant supervision, as
MedCAT's self-supervised training does it, turns that text into training mentions: every place where a
name of exactly one KB entity occurs is a mention of that entity.

:class:`NameMatcher` finds them: each KB name and synonym is a key (:func:`~spacy_pel.kb.normalize`:
case-folded, punctuation runs as one space); a key of two or more entities is dropped; a short name
(``max_case_folded`` characters or fewer: *PAN*, *ACE*) matches only as written, so ``pan`` is no
mention of puromycin aminonucleoside; a one-token name that is a stop word never matches. Matches are
the longest at each token, left to right, never overlapping. ``types`` keeps the entities of those KB
types only (a chemical and disease corpus: ``Chemicals and Drugs``, ``Diseases``).

With ``swap``, that share of the mentions is written with another name of the same entity in its place
(a random one of the entity's names as running text): the sentence then holds a synonym, and a model
trained on it learns to map a surface form it cannot copy from the KB row. The result is a ``.spacy``
corpus like ``convert``'s, every mention labelled ``label``, for ``adapt --paths.train SILVER
--synonyms.replay SHARE`` (or ``train``).

With ``short_forms``, an abbreviation the text defines for a matched name (``dilated cardiomyopathy
(DCM)``, found as the linker's abbreviation rule finds it) is a mention of that name's entity wherever it
occurs after the definition, the parenthesis included: abbreviations are a large share of real mentions
and, being short and ambiguous, seldom a unique KB name.
"""
from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Dict, Iterable, Iterator, List, Optional, Tuple

from spacy.language import Language
from spacy.tokens import Doc

from ..corpora import CorpusFormatError, PathLike
from ..corpus_formats import corpus_docs, set_gold_spans
from ..files import BadLines, read_lines
from ..kb import Entity, normalize
from ..pipeline.abbreviations import definitions, whole_word
from .entity_swaps import running_text_names

LABEL = "ENTITY"
TEXT_SUFFIX = ".txt"  # raw text, one document a line, unless its first line is PubTator's (PMID|t|title)
_PUBTATOR_TITLE = re.compile(r"^[^|\s]+\|t\|")


@dataclass
class SilverStats:
    """What :func:`silver_docs` found: docs read and written, mentions, swaps, names left out."""

    docs: int = 0
    docs_with_mentions: int = 0
    mentions: int = 0
    swapped: int = 0
    unaligned: int = 0
    capped: int = 0
    short_forms: int = 0
    entities: Counter = field(default_factory=Counter)

    def to_dict(self) -> dict:
        return {"docs": self.docs, "docs_with_mentions": self.docs_with_mentions, "mentions": self.mentions,
                "short_forms": self.short_forms, "swapped": self.swapped, "unaligned": self.unaligned,
                "capped": self.capped, "distinct_entities": len(self.entities)}


def _edge(token) -> bool:
    """A token a mention may begin or end with: not a space, not punctuation."""
    return not (token.is_space or token.is_punct)


class NameMatcher:
    """The names of exactly one KB entity, matched in tokenised text (see the module doc)."""

    def __init__(self, entities: Iterable[Entity], types: Optional[Collection[str]] = None,
                 max_case_folded: int = 4, max_tokens: int = 8, stop_words: Collection[str] = (), short_forms: bool = False):
        keep = None if types is None else set(types)
        owners: Dict[Tuple[bool, str], set] = {}
        self.names: Dict[str, List[str]] = {}
        for entity in entities:
            if keep is not None and not keep.intersection(entity.types):
                continue
            names = [entity.name, *entity.aliases]
            self.names[entity.id] = running_text_names(names) or [entity.name]
            for name in names:
                key = self.key(name, max_case_folded)
                if key[1] and key[1].lower() not in stop_words and len(key[1].split()) <= max_tokens:
                    owners.setdefault(key, set()).add(entity.id)
        self.keys = {key: next(iter(ids)) for key, ids in owners.items() if len(ids) == 1}
        self.max_case_folded = max_case_folded
        self.max_tokens = max_tokens
        self.short_forms = short_forms

    @staticmethod
    def key(text: str, max_case_folded: int) -> Tuple[bool, str]:
        """``(as written?, key)``: a short name is its own stripped text, any other its normalised form."""
        text = text.strip()
        return (True, text) if len(text) <= max_case_folded else (False, normalize(text))

    def entity_of(self, text: str) -> Optional[str]:
        return self.keys.get(self.key(text, self.max_case_folded))

    def __call__(self, doc: Doc) -> List[Tuple[int, int, str]]:
        """``(start token, end token, entity id)`` of every match in ``doc``: longest first at each
        token, left to right, never overlapping."""
        out, i, n = [], 0, len(doc)
        while i < n:
            for j in range(min(n, i + self.max_tokens), i, -1):
                if not (_edge(doc[i]) and _edge(doc[j - 1])):  # the key drops punctuation: "(cancer" is no name
                    continue
                entity = self.entity_of(doc[i:j].text)
                if entity is not None:
                    out.append((i, j, entity))
                    i = j
                    break
            else:
                i += 1
        return out


def short_form_matches(doc: Doc, matches: List[Tuple[int, int, str]]) -> List[Tuple[int, int, str]]:
    """``(start token, end token, entity id)`` of the short forms ``doc`` defines for a match: in ``long form
    (SF)`` where the long form is exactly a match, each later occurrence of SF (a whole word, its tokens
    not already part of a match) is a mention of that match's entity."""
    defined = definitions(doc.text)
    if not defined:  # most documents: nothing more to index
        return []
    by_chars = {(doc[a].idx, doc[b - 1].idx + len(doc[b - 1])): entity for a, b, entity in matches}
    taken = {i for a, b, _ in matches for i in range(a, b)}
    out = []
    for short, (_, begin, end) in defined.items():
        entity = by_chars.get((begin, end))
        if entity is None:
            continue
        for found in whole_word(short).finditer(doc.text[end:]):
            span = doc.char_span(end + found.start(), end + found.end())
            if span is not None and not taken.intersection(range(span.start, span.end)):
                out.append((span.start, span.end, entity))
                taken.update(range(span.start, span.end))
    return sorted(out)


def silver_doc(nlp: Language, text: str, matcher: NameMatcher, swap: float, rng: random.Random,
               stats: SilverStats, label: str = LABEL, max_per_entity: int = 0) -> Optional[Doc]:
    """``text`` with its matched names as linked mentions (a ``swap`` share renamed), or None without
    any; an entity with ``max_per_entity`` mentions already (0: no cap) gets no more."""
    source = nlp.make_doc(text)
    stats.docs += 1
    pieces, spans, at, cursor, taken = [], [], 0, 0, Counter()
    matches = matcher(source)
    if matcher.short_forms:
        shorts = short_form_matches(source, matches)
        stats.short_forms += len(shorts)
        matches = sorted(matches + shorts)
    for start, end, entity in matches:
        if max_per_entity and stats.entities[entity] + taken[entity] >= max_per_entity:
            stats.capped += 1
            continue
        taken[entity] += 1
        begin, finish = source[start].idx, source[end - 1].idx + len(source[end - 1])
        surface = source.text[begin:finish]
        others = [n for n in matcher.names[entity] if normalize(n) != normalize(surface)]  # not the name in another case
        if swap > 0 and others and rng.random() < swap:
            surface = rng.choice(others)
            stats.swapped += 1
        pieces += [source.text[cursor:begin], surface]
        at += begin - cursor
        spans.append((at, at + len(surface), entity))
        at += len(surface)
        cursor = finish
    if not spans:
        return None
    pieces.append(source.text[cursor:])
    doc = nlp.make_doc("".join(pieces))
    kept = []
    for begin, finish, entity in spans:
        span = doc.char_span(begin, finish, label=label, kb_id=entity)
        if span is None:  # a swapped name the tokenizer splits off its neighbours differently
            stats.unaligned += 1
            continue
        kept.append(span)
        stats.entities[entity] += 1
    if not kept:
        return None
    set_gold_spans(doc, kept)
    stats.mentions += len(kept)
    stats.docs_with_mentions += 1
    return doc


def silver_docs(nlp: Language, texts: Iterable[str], matcher: NameMatcher, swap: float = 0.0, seed: int = 0,
                stats: Optional[SilverStats] = None, label: str = LABEL, max_per_entity: int = 0) -> Iterator[Doc]:
    """The docs of ``texts`` that hold at least one match, each match a linked mention (:func:`silver_doc`;
    an entity's matches after its first ``max_per_entity`` are left as plain text)."""
    if not 0 <= swap <= 1:
        raise ValueError(f"swap must be in [0, 1], got {swap}")
    stats = stats if stats is not None else SilverStats()
    rng = random.Random(seed)
    for text in texts:
        doc = silver_doc(nlp, text, matcher, swap, rng, stats, label, max_per_entity)
        if doc is not None:
            yield doc


def raw_texts(nlp: Language, path: PathLike, bad_lines: Optional[BadLines] = None) -> Iterator[str]:
    """The documents' text of ``path``: the non-blank lines of a ``.txt`` file (unless it is PubTator),
    else the texts of a corpus in any format ``convert`` reads, its annotations left unused (a malformed
    line is recorded in ``bad_lines`` when given, as ``convert --skip-bad-lines`` does).

    A ``.txt`` file is read as every input file is (:func:`~spacy_pel.files.read_lines`): a byte-order
    mark is dropped, a line that is not UTF-8 is refused as ``FILE:LINE: reason`` (or skipped into
    ``bad_lines``), and a file without any text is refused, as a corpus without documents is."""
    path = Path(path)
    if path.suffix.lower() == TEXT_SUFFIX and not _is_pubtator(path):
        found, before = False, bad_lines.count if bad_lines is not None else 0
        for _, line in read_lines(path, CorpusFormatError, bad_lines):
            if line.strip():
                found = True
                yield line.strip()
        if not found:
            n_bad = bad_lines.count - before if bad_lines is not None else 0
            skipped = f" ({n_bad} malformed line(s) skipped)" if n_bad else ""
            raise CorpusFormatError(path, 1, f"no text in this file (a .txt file holds one document a line){skipped}")
        return
    yield from (doc.text for doc in corpus_docs(nlp, path, bad_lines=bad_lines))


def _is_pubtator(path: Path) -> bool:
    """Whether the first non-blank line of a ``.txt`` file is a PubTator title (``PMID|t|``); lines that are
    not UTF-8 are passed over here, and reported when the file is read."""
    first = next((line.strip() for _, line in read_lines(path, CorpusFormatError, BadLines()) if line.strip()), None)
    return first is not None and bool(_PUBTATOR_TITLE.match(first))
