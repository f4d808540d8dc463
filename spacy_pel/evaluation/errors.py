"""The gold mentions a linker gets wrong, each with what could have told it the right entity
(``python -m spacy_pel evaluate --errors FILE``).

Three kinds of error, one line each in the errors file:

* ``wrong_entity``: an in-KB gold mention whose first candidate is not a gold entity (recall@1's misses);
* ``called_nil``: an in-KB gold mention whose first candidate is right but whose confidence is under
  the NIL threshold;
* ``linked_nil``: a gold ``NIL`` mention the linker gave an entity.

A ``wrong_entity`` error gets one cause, by what the KB's names and the training corpus say about
its text — the normalised text (:func:`~spacy_pel.kb.entity.normalize`, and the space-free form of a
code name: :func:`~spacy_pel.retrieval.table.compact_key`) looked up among every KB entity's names:

* ``gold_name_unique``: a name of the gold entity and of no other: the KB alone named the answer;
* ``gold_name_shared``: a name of the gold entity and of other entities: an ambiguous name;
* ``training_alias``: no name of the gold entity, but linked to it in the training corpus;
* ``no_name``: neither: what links it is knowledge that no KB name or training mention carries, or
  an annotation convention.

Each line also gives where the gold entity ranked among the candidates, the names of the gold and
the predicted entities, and the mention in its context.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set

from spacy.tokens import Doc

from ..corpora import NIL
from ..kb.entity import normalize
from ..pipeline.aliases import mention_counts
from ..pipeline.mentions import linked_gold
from ..retrieval.index import EntityIndex
from ..retrieval.table import compact_key
from .linking import has_candidate, row_confidence

KINDS = ("wrong_entity", "called_nil", "linked_nil")
CAUSES = ("gold_name_unique", "gold_name_shared", "training_alias", "no_name")
CONTEXT_CHARS = 60


def surface_ids(docs: Iterable[Doc], canonical: Callable[[str], str]) -> Dict[str, Set[str]]:
    """Normalised gold mention text → the primary ids it is linked to in ``docs`` (the alias table's
    :func:`~spacy_pel.pipeline.aliases.mention_counts`, ids mapped by ``canonical``)."""
    return {key: {canonical(i) for i in ids} for key, ids in mention_counts(docs).items()}


def name_rows(index: EntityIndex, text: str) -> Set[int]:
    """The rows of the KB entities one of whose names is ``text`` (normalised; a code name with or
    without its spaces)."""
    key = normalize(text)
    rows = set(index.entities.name_index().get(key) or ())
    compact = compact_key(key)
    if compact:
        rows.update(index.entities.compact_index().get(compact) or ())
    return rows


def miss_cause(text: str, gold: Sequence[str], index: EntityIndex, training: Optional[Dict[str, Set[str]]] = None) -> str:
    """The cause of a ``wrong_entity`` error (see the module doc); ``gold`` are primary ids in the KB."""
    named = name_rows(index, text)
    gold_rows = {index.row[g] for g in gold if g in index.row}
    if named & gold_rows:
        return "gold_name_shared" if named - gold_rows else "gold_name_unique"
    if training is not None and set(gold) & training.get(normalize(text), set()):
        return "training_alias"
    return "no_name"


def _context(doc: Doc, start: int, end: int) -> str:
    left = doc.text[max(0, start - CONTEXT_CHARS) : start]
    right = doc.text[end : end + CONTEXT_CHARS]
    return " ".join(f"{left}[[{doc.text[start:end]}]]{right}".split())


def _names(index: EntityIndex, ids: Iterable[str]) -> List[str]:
    return [index.entities.names[index.row[i]] if i in index.row else "" for i in ids]


def mention_errors(
    rows: Sequence[tuple],
    docs: Sequence[Doc],
    index: EntityIndex,
    threshold: Optional[float] = None,
    training: Optional[Dict[str, Set[str]]] = None,
    train_ids: Optional[set] = None,
    mentions: Any = None,
) -> List[dict]:
    """The errors among :func:`~spacy_pel.evaluation.linking.mention_table` ``rows`` of ``docs`` (the
    same docs, in order); ``training`` is :func:`surface_ids` of the training corpus, ``train_ids``
    its primary ids (for ``seen``). ``mentions``: the linker's mention source, whose gold mentions the rows
    are (a linker of some labels, one per KB, is given those labels' only; None: every gold mention).
    Gold ids absent from the KB are not errors of the linker's: left out."""
    errors: List[dict] = []
    spans = [(n, doc, span) for n, doc in enumerate(docs) for span in linked_gold(mentions, doc)]
    if len(spans) != len(rows):
        raise ValueError(f"{len(rows)} rows for {len(spans)} gold mentions: rows and docs do not match")
    for (n, doc, span), row in zip(spans, rows):
        gold, cands = row[0], row[1]
        confidence = row_confidence(row)
        called_nil = (threshold is not None and confidence < threshold) or not has_candidate(row)  # as metrics: no candidate, NIL
        if gold == [NIL]:
            if called_nil:
                continue
            kind = "linked_nil"
        elif not any(g in index.row for g in gold):
            continue
        elif cands and cands[0] in gold:
            if not called_nil:
                continue
            kind = "called_nil"
        else:
            kind = "wrong_entity"
        gold_in_kb = [g for g in gold if g in index.row]
        rank = next((r + 1 for r, c in enumerate(cands) if c in gold_in_kb), None)
        top = cands[0] if cands else None
        error = {
            "kind": kind,
            "cause": miss_cause(span.text, gold_in_kb, index, training) if kind == "wrong_entity" else None,
            "doc": n, "doc_id": doc.user_data.get("pmid"), "start": span.start_char, "end": span.end_char,
            "text": span.text, "label": span.label_, "context": _context(doc, span.start_char, span.end_char),
            "gold": gold, "gold_names": _names(index, gold),
            "predicted": NIL if called_nil else top, "first_candidate": top, "first_candidate_name": _names(index, [top])[0] if top else "",
            "gold_rank": rank, "confidence": round(confidence, 4),
        }
        if train_ids is not None and kind != "linked_nil":
            error["seen"] = any(g in train_ids for g in gold)
        errors.append(error)
    return errors


def summary(errors: Sequence[dict]) -> dict:
    """Counts of the errors by kind, and of the ``wrong_entity`` ones by cause (every key present)."""
    kinds = Counter(e["kind"] for e in errors)
    causes = Counter(e["cause"] for e in errors if e["kind"] == "wrong_entity")
    return {"kinds": {k: kinds[k] for k in KINDS}, "wrong_entity_causes": {c: causes[c] for c in CAUSES}}


def summary_markdown(counts: dict) -> str:
    kinds, causes = counts["kinds"], counts["wrong_entity_causes"]
    return ("- errors: " + ", ".join(f"{k} {v}" for k, v in kinds.items())
            + "; wrong entity by cause: " + ", ".join(f"{k} {v}" for k, v in causes.items()) + "\n")
