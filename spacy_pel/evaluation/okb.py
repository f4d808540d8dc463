"""``python -m spacy_pel.okb``: an out-of-KB (OKB) setting, as in the proxy-loss paper.

Every KB entity of the chosen MeSH tree branches (e.g. ``C10``, nervous-system diseases) is removed —
descriptors with a tree number under a branch, and supplementary records all of whose mapped
descriptors are removed — and the corpus mentions of removed entities are relabelled ``NIL``.
A branch is a whole tree number: ``C10`` is ``C10`` and ``C10.…``, never ``C100``; a lone letter
(``C``) is a whole MeSH category; a branch may also name a whole KB type (``Disease``).
The reduced KB is cut from an existing KB folder (same encoder, nothing re-encoded). Every input is
read and checked before anything is written, and the output folder (``kb/``, the relabelled corpora,
``okb_report.json``) replaces an older one only once complete.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set

import spacy
from spacy.tokens import Span

from ..corpora import GOLD_KEY, ID_SEP, NIL, gold_ids, read_docbin, write_docbin
from ..files import InputError, atomic_dir, json_text
from ..kb import Entity
from ..retrieval.index import EntityIndex

REPORT = "okb_report.json"
KB_FOLDER = "kb"


def under(tree_number: str, branch: str) -> bool:
    """Whether ``tree_number`` is ``branch`` or below it, matched by whole tree components (``C10`` holds
    ``C10.228``, not ``C100``); a lone letter is a whole MeSH category (``C`` holds every ``C…`` number)."""
    if len(branch) == 1 and branch.isalpha():
        return tree_number[:1] == branch
    return tree_number == branch or tree_number.startswith(branch + ".")


def _by_branch(entities: Sequence[Entity], branches: Sequence[str]) -> Dict[str, Set[str]]:
    """Each branch's ids: the entities with a tree number under it (:func:`under`) or of that type."""
    out: Dict[str, Set[str]] = {b: set() for b in branches}
    for e in entities:
        trees, types = e.extra.get("tree_numbers", []), set(e.types)
        for b in out:
            if b in types or any(under(t, b) for t in trees):
                out[b].add(e.id)
    return out


def _with_mapped(entities: Sequence[Entity], out: Set[str]) -> Set[str]:
    """``out`` and the supplementary records all of whose mapped descriptors are in it."""
    out = set(out)
    for e in entities:
        mapped = e.extra.get("mapped_to") or []
        if mapped and all(m in out for m in mapped):
            out.add(e.id)
    return out


def removed_ids(entities: Sequence[Entity], branches: Sequence[str]) -> Set[str]:
    """Ids of the entities under any of ``branches`` (MeSH tree branches, see :func:`under`, or whole types)."""
    return _with_mapped(entities, set().union(*_by_branch(entities, branches).values()))


def relabel(docs, removed: Set[str], canonical: Optional[Callable[[str], str]] = None) -> Dict[str, int]:
    """Drop removed ids from gold spans; spans left with none become NIL. Returns counts.

    ``canonical`` (e.g. :meth:`EntityIndex.canonical`) maps a gold id to the primary id it names, so a
    mention annotated with an alternative id of a removed entity (MEDIC's OMIM numbers) is removed too;
    each part of a composite id (``A|B``) is resolved on its own. Kept ids are written as they were."""
    canonical = canonical or (lambda i: i)
    counts = {"mentions": 0, "to_nil": 0, "partly_removed": 0}
    for doc in docs:
        spans = []
        for s in doc.spans[GOLD_KEY] if GOLD_KEY in doc.spans else doc.ents:
            ids = gold_ids(s.kb_id_)
            keep = [i for i in ids if canonical(i) not in removed]
            counts["mentions"] += 1
            if ids != [NIL] and not keep:
                counts["to_nil"] += 1
            elif len(keep) < len(ids):
                counts["partly_removed"] += 1
            spans.append(Span(doc, s.start, s.end, label=s.label_, kb_id=ID_SEP.join(keep) if keep else NIL))
        doc.spans[GOLD_KEY] = spans
        doc.ents = _relabelled_ents(doc.ents, spans)
    return counts


def _relabelled_ents(ents: Sequence[Span], spans: Sequence[Span]) -> List[Span]:
    """Each of ``ents`` as its relabelled gold span: the one of its boundaries and label, else the first of its
    boundaries (a span annotated with two types is two gold spans, and ents must not overlap); an ent that is
    no gold span is dropped."""
    out = []
    for ent in ents:
        same = [s for s in spans if s.start == ent.start and s.end == ent.end]
        if same:
            out.append(next((s for s in same if s.label_ == ent.label_), same[0]))
    return out


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_paths(kb: Path, corpora: Sequence[Path], output: Path) -> None:
    """Refuse, before anything is read or written, an output folder that would replace an input (it
    holds the KB or a corpus, or lies inside the KB folder), that is a file, or that holds files of
    something else (it is replaced as a whole); and two corpora whose relabelled copies would share a name."""
    out = output.resolve()
    for path, what in [(kb, "the KB folder"), *((c, "the corpus") for c in corpora)]:
        if _inside(path.resolve(), out):
            raise InputError(f"output {output} holds {what} {path}: okb would replace its own input; "
                             "give another output folder")
    if _inside(out, kb.resolve()):
        raise InputError(f"output {output} is inside the KB folder {kb}; give another output folder")
    seen: Dict[str, Path] = {}
    for path in corpora:
        if path.name in (KB_FOLDER, REPORT):
            raise InputError(f"corpus {path} would be written over the output's own {path.name}; rename it")
        if path.name in seen:
            raise InputError(f"--corpus {seen[path.name]} and {path} have the same file name {path.name}: "
                             f"{output} would hold only one of them; rename one")
        seen[path.name] = path
    if output.exists() and not output.is_dir():
        raise InputError(f"output {output} is a file; give a folder")
    if output.is_dir() and any(output.iterdir()) and not (output / REPORT).exists():
        raise InputError(f"output {output} is a folder with other files (no {REPORT}): okb replaces its output "
                         "folder as a whole; give a new or empty folder")


def make_okb(kb: Path, branches: Sequence[str], corpora: Sequence[Path], output: Path) -> dict:
    """Write ``output``: ``kb/`` (``kb`` without the entities under ``branches``), each corpus relabelled
    (by its file name) and ``okb_report.json``; returns the report. Everything is read and checked
    first; the folder replaces an older ``output`` only once complete."""
    kb, output, corpora = Path(kb), Path(output), [Path(c) for c in corpora]
    if not branches:
        raise InputError("give at least one branch to remove (e.g. C10)")
    check_paths(kb, corpora, output)
    index = EntityIndex.from_disk(kb)
    by_branch = _by_branch(index.entities, branches)
    removed = _with_mapped(index.entities, set().union(*by_branch.values()))
    empty = [b for b, ids in by_branch.items() if not ids]
    if empty or not removed:
        what = "nothing would be removed" if not removed else "that --remove removes nothing (a typo?)"
        raise InputError(f"{kb}: no entity is under {', '.join(empty or branches)} (MeSH tree numbers such as C10, which holds "
                         f"C10 and C10.…, not C100; or whole KB types): {what}")
    nlp = spacy.blank("en")
    loaded = [(path, read_docbin(nlp, path)) for path in corpora]  # every corpus read before anything is written
    keep = [i for i, e in enumerate(index.entities) if e.id not in removed]
    report = {"branches": list(branches), "kb_entities": len(index), "removed_entities": len(removed), "corpora": {}}
    for path, docs in loaded:
        report["corpora"][path.name] = relabel(docs, removed, index.canonical)
    with atomic_dir(output) as tmp:
        index.subset(keep).to_disk(tmp / KB_FOLDER)
        for path, docs in loaded:
            write_docbin(docs, tmp / path.name)
        (tmp / REPORT).write_text(json_text(report, indent=2), encoding="utf8")
    return report
