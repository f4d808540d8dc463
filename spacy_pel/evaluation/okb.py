"""``python -m spacy_pel.okb``: an out-of-KB (OKB) setting, as in the proxy-loss paper.

Every KB entity of the chosen MeSH tree branches (e.g. ``C10``, nervous-system diseases) is removed —
descriptors with a tree number under a branch, and supplementary records all of whose mapped
descriptors are removed — and the corpus mentions of removed entities are relabelled ``NIL``.
The reduced KB is cut from an existing KB folder (same encoder, nothing re-encoded).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Sequence, Set

import spacy
from spacy.tokens import Span

from ..corpora import GOLD_KEY, ID_SEP, NIL, gold_ids, read_docbin, write_docbin
from ..files import InputError
from ..kb import Entity
from ..retrieval.index import EntityIndex


def removed_ids(entities: Sequence[Entity], branches: Sequence[str]) -> Set[str]:
    """Ids of the entities under any of ``branches`` (tree-number prefixes, or whole types)."""
    prefixes = tuple(branches)
    out = {
        e.id
        for e in entities
        if any(t.startswith(prefixes) for t in e.extra.get("tree_numbers", [])) or any(t in branches for t in e.types)
    }
    for e in entities:
        mapped = e.extra.get("mapped_to") or []
        if mapped and all(m in out for m in mapped):
            out.add(e.id)
    return out


def relabel(docs, removed: Set[str]) -> Dict[str, int]:
    """Drop removed ids from gold spans; spans left with none become NIL. Returns counts."""
    counts = {"mentions": 0, "to_nil": 0, "partly_removed": 0}
    for doc in docs:
        spans = []
        for s in doc.spans[GOLD_KEY] if GOLD_KEY in doc.spans else doc.ents:
            ids = gold_ids(s.kb_id_)
            keep = [i for i in ids if i not in removed]
            counts["mentions"] += 1
            if ids != [NIL] and not keep:
                counts["to_nil"] += 1
            elif len(keep) < len(ids):
                counts["partly_removed"] += 1
            spans.append(Span(doc, s.start, s.end, label=s.label_, kb_id=ID_SEP.join(keep) if keep else NIL))
        doc.spans[GOLD_KEY] = spans
        doc.ents = [e for e in spans if any(e.start == x.start and e.end == x.end for x in doc.ents)]
    return counts


def make_okb(kb: Path, branches: Sequence[str], corpora: Sequence[Path], output: Path) -> dict:
    index = EntityIndex.from_disk(kb)
    removed = removed_ids(index.entities, branches)
    if not removed:
        raise InputError(f"{kb}: no entity is under {', '.join(branches)} (MeSH tree-number prefixes such as C10, or "
                         "whole KB types): nothing would be removed")
    keep = [i for i, e in enumerate(index.entities) if e.id not in removed]
    index.subset(keep).to_disk(output / "kb")
    report = {"branches": list(branches), "kb_entities": len(index), "removed_entities": len(removed), "corpora": {}}
    nlp = spacy.blank("en")
    for path in corpora:
        docs = read_docbin(nlp, path)
        report["corpora"][path.name] = relabel(docs, removed)
        write_docbin(docs, output / path.name)
    (output / "okb_report.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    return report
