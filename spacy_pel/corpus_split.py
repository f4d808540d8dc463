"""One annotated corpus split by document into a training part and a dev part (``python -m spacy_pel
split``): for a corpus that comes without a dev split (a user's own annotations), so that the workflow's
``train_corpora`` and ``dev_corpus`` vars each have a file.

Whole documents go to one part or the other (a mention's context and the document's other mentions of
the same entity never straddle the split), drawn at random with a seed, each part kept in the corpus's
order. The counts say how many dev mentions link an entity the training part never links (``unseen``).
Without the KB that is every dev mention other than NIL none of whose ids training uses, ids compared as
written. With the KB (``primary``: an id or alternative id → its entity's primary id) it is the count the dev
report's unseen-entity row (``evaluate --train``) is measured on: ids resolved to their entity (an alternative id
is its entity's), mentions of ids the KB lacks left out and counted as ``absent``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import spacy
from spacy.tokens import Doc

from .corpora import NIL, corpus_ids, gold_ids, gold_spans, read_docbin, write_docbin
from .files import InputError, PathLike, atomic_write


def check_share(dev_share: float) -> None:
    if not 0.0 < dev_share < 1.0:
        raise InputError(f"dev share {dev_share}: must be between 0 and 1 (e.g. 0.1 for a tenth of the documents)")


def check_seed(seed: int) -> None:
    if seed < 0:
        raise InputError(f"seed {seed}: must be 0 or more")


def split_docs(n_docs: int, dev_share: float, seed: int = 0) -> Tuple[List[int], List[int]]:
    """The indices of the training and dev documents of a corpus of ``n_docs``: ``round(dev_share ×
    n_docs)`` of them (at least one, and at least one left for training) drawn at random by ``seed`` for
    dev, each part in ascending order."""
    check_share(dev_share)
    check_seed(seed)
    if n_docs < 2:
        raise InputError(f"a corpus of {n_docs} document(s) cannot be split: both parts need one")
    n_dev = min(n_docs - 1, max(1, round(dev_share * n_docs)))
    dev = set(np.random.default_rng(seed).permutation(n_docs)[:n_dev].tolist())
    return [i for i in range(n_docs) if i not in dev], sorted(dev)


def part_counts(docs: Sequence[Doc]) -> Dict[str, int]:
    """Documents, gold mentions and NIL mentions of a part."""
    spans = [span for doc in docs for span in gold_spans(doc)]
    return {"docs": len(docs), "mentions": len(spans), "nil": sum(span.kb_id_ == NIL for span in spans)}


PrimaryId = Callable[[str], Optional[str]]  # an id or alternative id → its entity's primary id; None: not in the KB


def unseen_counts(train: Sequence[Doc], dev: Sequence[Doc], primary: Optional[PrimaryId] = None) -> Dict[str, int]:
    """How many ``dev`` mentions link entities ``train`` never links (``unseen``). Without ``primary``: the
    mentions other than NIL none of whose ids ``train`` uses, ids as written. With it, as ``evaluate --train``
    counts its unseen row: each id taken as its entity's primary id, a mention none of whose ids the KB has
    left out and counted as ``absent``."""
    if primary is None:
        seen = corpus_ids(train)
        return {"unseen": sum(1 for doc in dev for span in gold_spans(doc)
                              if span.kb_id_ != NIL and not any(i in seen for i in gold_ids(span.kb_id_)))}
    seen = {primary(i) or i for i in corpus_ids(train)}
    counts = {"unseen": 0, "absent": 0}
    for span in (span for doc in dev for span in gold_spans(doc)):
        ids = gold_ids(span.kb_id_)
        if ids == [NIL]:
            continue
        if all(primary(i) is None for i in ids):
            counts["absent"] += 1
        elif not any((primary(i) or i) in seen for i in ids):
            counts["unseen"] += 1
    return counts


def split_corpus(corpus: PathLike, train_output: PathLike, dev_output: PathLike, dev_share: float = 0.1,
                 seed: int = 0, lang: str = "en", primary: Optional[PrimaryId] = None) -> Dict[str, object]:
    """Split the ``.spacy`` file ``corpus`` by document (:func:`split_docs`) into ``train_output`` and
    ``dev_output`` (each written atomically); returns the counts of each part, the dev documents' ids
    (their PMIDs, ``doc.user_data["pmid"]``; the document's place in the corpus where it has none) and
    how many dev mentions link entities the training part does not (:func:`unseen_counts`; with the KB's
    ``primary`` ids, exactly the dev report's unseen row, and ``absent``)."""
    check_share(dev_share)
    check_seed(seed)
    paths = [Path(corpus), Path(train_output), Path(dev_output)]
    if len({p.resolve() for p in paths}) < 3:
        raise InputError(f"the corpus and the two outputs must be three different files: {', '.join(map(str, paths))}")
    for output in paths[1:]:  # both checked before either is written
        if output.is_dir():
            raise InputError(f"cannot write output {output}: it is a folder, not a file")
    docs = read_docbin(spacy.blank(lang), corpus)
    train_rows, dev_rows = split_docs(len(docs), dev_share, seed)
    train, dev = [docs[i] for i in train_rows], [docs[i] for i in dev_rows]
    unseen = unseen_counts(train, dev, primary)
    _write_parts(train, dev, Path(train_output), Path(dev_output))
    return {"train": part_counts(train), "dev": {**part_counts(dev), **unseen}, "seed": seed,
            "dev_doc_ids": [str(doc.user_data.get("pmid", i)) for i, doc in zip(dev_rows, dev)]}


def _write_parts(train: List[Doc], dev: List[Doc], train_output: Path, dev_output: Path) -> None:
    """Both parts serialised to temporary files before either replaces its output, so that a failed
    write (a full disk) leaves the files at both paths as they were: never a new training part beside
    an old dev part."""

    def write_both(train_tmp: Path) -> None:
        write_docbin(train, train_tmp)
        write_docbin(dev, dev_output)  # the dev part is renamed into place, then the training part

    atomic_write(train_output, write_both)
