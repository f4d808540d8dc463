"""How ``pel_linker`` decides NIL: a registered strategy turns each mention's evidence into a linking
*confidence*, and the mention is NIL when its confidence is below the component's ``threshold``.

The evidence of a mention (:data:`FEATURES`, computed by :func:`nil_features` once the candidate
rules have run):

* ``top`` — the best candidate's score;
* ``margin`` — its lead over the runner-up (the whole top score when there is none), searched whatever
  ``top_k`` is (:mod:`.linked`);
* ``rule`` — 1 when a rule chose the candidates by name (decided by the alias table, an abbreviation
  or a spelling variant, or restricted to the alias table's entities), else 0;
* ``type`` — 1 when the best entity has a KB type that the span's label goes with (``label_types``,
  learned from a gold corpus), 0 when it has none of them; for a label the map does not name
  (scispaCy's ``ENTITY``), 1 when the best entity has a type the map names for any label, else 0.5
  (unknown) — such a span is judged as the annotated ones it resembles, and an entity of a type the
  corpus never annotated is neither favoured nor held against it;
* ``chars`` — how close the mention's text is to the best entity's closest name, letter by letter:
  the cosine of their character 3-gram counts (normalised texts; the same measure as the
  ``char_ngrams`` rule, BioSyn's sparse view);
* ``words`` — the share of the mention's words found in one name of the best entity (the best name);
* ``span`` — the span model's probability of the mention when a span finder found it (1 for a
  mention the pipeline was given: ``doc.ents``, a span group): for an end-to-end pipeline, how sure
  the finder is that the words are a mention at all, which the linking scores do not say.

The two lexical features (:func:`lexical_features`) are computed only for a strategy that uses them
(``lexical``): a confident dense match whose names share little with the mention's text is how an
entity the KB lacks often looks (``parkinsonian`` → ``Parkinson Disease 12`` when the KB has no
Parkinson's disease).

Strategies (chosen in the config's ``[components.pel_linker.nil]`` block):

* ``spacy_pel.nil.top_score.v1`` (default) — confidence = ``top``: the threshold rule;
* ``spacy_pel.nil.classifier.v1`` — a logistic model, confidence = P(the mention's entity is in the
  KB) = σ(bias + Σ weights[t] · t) over terms ``t``: a feature (``top``) or the product of two
  (``top*margin``, ``top*top``: :data:`PAIRS`). ``python -m spacy_pel calibrate --nil classifier``
  fits it over the features on a corpus with NIL mentions (``--nil classifier_pairs``: over the
  features and their pairwise products) and writes its weights and the threshold into the pipeline's
  config.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
from spacy.util import registry

from ..kb import normalize
from ..retrieval.index import EntityIndex
from .contracts import label_types_ok
from .label_names import LabelMap
from .rules.char_ngrams import ngram_cosine

FEATURES = ("top", "margin", "rule", "type", "chars", "words", "span")
LEXICAL = ("chars", "words")
# the classifier's second-order terms: every product of two features (squares included), "a*b"
PAIRS = tuple(f"{a}*{b}" for i, a in enumerate(FEATURES) for b in FEATURES[i:])
UNKNOWN_TYPE = 0.5  # the ``type`` feature when the label is unknown or there is no candidate


def term_columns(term: str) -> Tuple[int, ...]:
    """The feature columns a classifier term multiplies: ``"top"`` → (0,), ``"top*margin"`` → (0, 1)."""
    names = term.split("*")
    if len(names) > 2 or any(n not in FEATURES for n in names):
        raise ValueError(f"spacy_pel.nil.classifier.v1: unknown features in {term!r}; known: {list(FEATURES)}, "
                         "or the product of two, such as 'top*margin'")
    return tuple(FEATURES.index(n) for n in names)


def pair_products(features: np.ndarray) -> np.ndarray:
    """``[n, len(PAIRS)]``: the products of the feature columns, in :data:`PAIRS` order."""
    return np.stack([features[:, i] * features[:, j] for i, j in map(term_columns, PAIRS)], axis=1)


def lexical_features(text: str, names: Iterable[str]) -> Tuple[float, float]:
    """``(chars, words)`` of a mention text against an entity's names (the best name for each)."""
    return _normalised_features(normalize(text), names)


def _normalised_features(key: str, names: Iterable[str]) -> Tuple[float, float]:
    words = set(key.split())
    chars = share = 0.0
    for name in names:
        other = normalize(name)
        chars = max(chars, ngram_cosine(key, other))
        share = max(share, len(words & set(other.split())) / max(len(words), 1))
    return chars, share


def nil_features(
    scores: np.ndarray, rows: np.ndarray, by_rule: Sequence[bool], labels: Sequence[str],
    index: EntityIndex, label_types: Optional[Dict[str, Sequence[str]]] = None,
    texts: Optional[Sequence[str]] = None, span: Optional[np.ndarray] = None,
) -> np.ndarray:
    """``[n, len(FEATURES)]`` evidence of ``n`` mentions from their top-k ``scores``/``rows`` (best
    first, row -1: none), whether a rule chose them (``by_rule``) and their labels; the lexical
    features from the mentions' ``texts`` when given (else 0); ``span``: the span model's
    probability of each mention (else 1: mentions the pipeline was given)."""
    n = len(rows)
    out = np.zeros((n, len(FEATURES)), np.float32)
    if n == 0:
        return out
    has = rows[:, 0] >= 0
    out[:, 0] = np.where(has, scores[:, 0], 0.0)
    second = np.where(rows[:, 1] >= 0, scores[:, 1], 0.0) if rows.shape[1] > 1 else np.zeros(n)
    out[:, 1] = np.where(has, out[:, 0] - second, 0.0)
    out[:, 2] = np.asarray(by_rule, dtype=np.float32)
    allowed = LabelMap({label: set(types) for label, types in (label_types or {}).items()})
    mapped = set().union(*allowed.values())
    for i, label in enumerate(labels):
        fits = allowed.for_label(label)
        if not has[i]:
            out[i, 3] = UNKNOWN_TYPE
        elif fits is not None:
            out[i, 3] = float(any(t in fits for t in index.entities.types[rows[i, 0]]))
        else:  # a label the map does not name: a type the map names for some label fits, any other is unknown
            out[i, 3] = 1.0 if mapped.intersection(index.entities.types[rows[i, 0]]) else UNKNOWN_TYPE
    if texts is not None:
        out[:, 4:6] = lexical_evidence(texts, rows[:, 0], has, index)
    out[:, 6] = 1.0 if span is None else span
    return out


def lexical_evidence(texts: Sequence[str], best: np.ndarray, has: np.ndarray, index: EntityIndex) -> np.ndarray:
    """``[n, 2]`` :func:`lexical_features` of each text against its best entity's names. A text that is
    one of the entity's names (the KB's name index says so) is ``(1, 1)`` without reading the record;
    a text repeated with the same best entity is compared once."""
    out = np.zeros((len(texts), 2), np.float32)
    names = index.entities.name_index()
    done: Dict[Tuple[str, int], Tuple[float, float]] = {}
    for i in np.flatnonzero(has).tolist():
        key = (texts[i], int(best[i]))
        if key not in done:
            text = normalize(key[0])
            if key[1] in (names.get(text) or ()):
                done[key] = (1.0, 1.0)
            else:
                entity = index.entities[key[1]]
                done[key] = _normalised_features(text, [entity.name, *entity.aliases])
        out[i] = done[key]
    return out


class TopScoreNil:
    """Confidence = the best candidate's score (NIL when it is below the threshold)."""

    label_types: Dict[str, List[str]] = {}
    lexical = False  # needs no lexical features

    def __call__(self, features: np.ndarray) -> np.ndarray:
        return features[:, 0].astype(np.float32)


def threshold_range(nil, rules: Iterable[object], metric: Optional[str]) -> Optional[Tuple[float, float]]:
    """The range a threshold of ``nil``'s confidence lies in, where it is known: the built-in top score's on a
    cosine KB, [-1, 1] widened by what ``rules`` add to scores (their ``score_bonus``: ``char_ngrams``); None
    for another strategy (its confidence on its own scale) or metric."""
    if type(nil) is not TopScoreNil or metric != "cosine":
        return None
    bonus = sum(float(getattr(rule, "score_bonus", 0.0)) for rule in rules)
    return -1.0 - bonus, 1.0 + bonus


def check_label_types(label_types, owner: str) -> None:
    """Refuse ``label_types`` that do not map each span label to a list of KB types (a string would be
    read as its letters)."""
    if not label_types_ok(label_types):
        raise ValueError(f"{owner}: `label_types` must map a label to a list of KB types, not {label_types!r}")


@dataclass
class ClassifierNil:
    """Confidence = σ(bias + Σ weights[t] · t) over terms ``t`` (a feature, or ``"a*b"`` the product of
    two): the probability that the mention's entity is in the KB."""

    weights: Dict[str, float] = field(default_factory=dict)
    bias: float = 0.0
    label_types: Dict[str, List[str]] = field(default_factory=dict)

    def __post_init__(self):
        columns = {term: term_columns(term) for term in self.weights}
        check_label_types(self.label_types, "spacy_pel.nil.classifier.v1")
        self.coef = np.array([float(self.weights.get(f, 0.0)) for f in FEATURES], np.float32)
        self.pairs = [(columns[t], np.float32(w)) for t, w in self.weights.items() if len(columns[t]) == 2 and w]
        # the lexical features cost a KB record read per mention: only when weighted (or being fitted)
        lexical = {FEATURES.index(f) for f in LEXICAL}
        self.lexical = not self.weights or any(w and lexical & set(columns[t]) for t, w in self.weights.items())

    def __call__(self, features: np.ndarray) -> np.ndarray:
        x = features.astype(np.float32)
        z = x @ self.coef + np.float32(self.bias)
        for (i, j), w in self.pairs:
            z += w * x[:, i] * x[:, j]
        return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)

    def as_config(self) -> dict:
        return {"@misc": "spacy_pel.nil.classifier.v1", "weights": dict(self.weights), "bias": self.bias,
                "label_types": {k: list(v) for k, v in self.label_types.items()}}


@registry.misc("spacy_pel.nil.top_score.v1")
def top_score_nil() -> TopScoreNil:
    """NIL when the best candidate's score is below the threshold."""
    return TopScoreNil()


@registry.misc("spacy_pel.nil.classifier.v1")
def classifier_nil(weights: Dict[str, float], bias: float = 0.0,
                   label_types: Optional[Dict[str, List[str]]] = None) -> ClassifierNil:
    """NIL when σ(bias + Σ weights[t] · t) is below the threshold; a term ``t`` is one of the evidence
    :data:`FEATURES` or the product of two (``"top*margin"``)."""
    return ClassifierNil(dict(weights), float(bias), dict(label_types or {}))
