"""The cross-encoder re-ranking rule ``spacy_pel.rules.rerank.v1``.

After retrieval (and after the rules written before it), every mention still open — not decided by a
rule's ``prepare`` (those hold one candidate, score ``DECIDED_SCORE``), not tied to another mention
(it takes that mention's re-ranked list), with more than one candidate, and, with ``skip_matched``,
not matched by name by the alias table — has its first ``candidates`` candidates scored by a
:class:`~spacy_pel.models.cross_encoder.CrossEncoder` reading the mention in its context and the
entity's name, types and synonyms together. Those candidates are re-ordered by
``cross-encoder score + retriever_weight × retriever score``; none is dropped, and the candidates
after them keep their place.

What a candidate's score becomes (``score``):

* ``"retriever"`` (default): each candidate keeps its own retriever score (a cosine for cosine
  KBs), so a NIL threshold calibrated on the retriever still reads the cosine of the entity now
  chosen — the scores of a re-ranked list are then no longer in decreasing order;
* ``"probability"``: the softmax of the combined scores over the scored candidates (in [0, 1], best
  first; the unscored candidates after them get 0). A NIL threshold must be calibrated again.

The model is saved inside the pipeline folder (``reranker/``); ``model`` is the path it came from.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
from spacy.util import registry

from ...models.cross_encoder import CROSS_PRECISIONS, CrossEncoder
from ...models.encoder import BiEncoder, Mention
from ...retrieval.index import EntityIndex
from ..config import LinkerPart
from .batch import CandidateBatch

RERANKER_DIR = "reranker"
SCORE_MODES = ("retriever", "probability")


def _flat_spans(batch: CandidateBatch) -> list:
    """``(doc, start, end)`` per mention, flat over the batch's docs."""
    return [(doc, a, b) for doc, spans in zip(batch.docs, batch.spans) for a, b, _ in spans]


class RerankRule(LinkerPart):
    """Re-orders the open mentions' first candidates by a cross-encoder (see the module doc)."""

    data_name = "reranker"

    def __init__(self, model: Optional[str] = None, candidates: int = 16, batch_size: int = 128,
                 precision: str = "fp32", retriever_weight: float = 0.0, score: str = "retriever",
                 skip_matched: bool = True):
        where = "spacy_pel.rules.rerank.v1"
        if model is not None and not isinstance(model, (str, Path)):
            raise ValueError(f"{where}: `model` must be a path or null, not {model!r}")
        for name, value, low in (("candidates", candidates, 2), ("batch_size", batch_size, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{where}: `{name}` must be an integer ≥ {low}, not {value!r}")
        if precision not in CROSS_PRECISIONS:
            raise ValueError(f"{where}: `precision` must be one of {', '.join(CROSS_PRECISIONS)}, not {precision!r}")
        if not isinstance(retriever_weight, (int, float)) or isinstance(retriever_weight, bool) or not np.isfinite(retriever_weight):
            raise ValueError(f"{where}: `retriever_weight` must be a finite number, not {retriever_weight!r}")
        if score not in SCORE_MODES:
            raise ValueError(f"{where}: `score` must be one of {', '.join(SCORE_MODES)}, not {score!r}")
        if not isinstance(skip_matched, bool):
            raise ValueError(f"{where}: `skip_matched` must be true or false, not {skip_matched!r}")
        self.source = str(model) if model else None
        self.candidates, self.batch_size, self.precision = candidates, batch_size, precision
        self.retriever_weight, self.score, self.skip_matched = float(retriever_weight), score, skip_matched
        self.model: Optional[CrossEncoder] = None
        self.index: Optional[EntityIndex] = None
        self.device = "cpu"
        # what the rule did since it was made: mentions re-ranked, pairs scored, seconds in the cross-encoder
        self.stats: Dict[str, float] = {"mentions": 0, "pairs": 0, "seconds": 0.0}

    # ------------------------------------------------------------------ LinkerPart
    def setup(self, encoder: BiEncoder, index: EntityIndex) -> None:
        if self.model is None and self.source:
            self.model = CrossEncoder.from_pretrained(self.source)
        self.index, self.device = index, str(encoder.device_)
        self._ready()

    def _ready(self) -> CrossEncoder:
        if self.model is None:
            raise ValueError("spacy_pel.rules.rerank.v1 has no model: set `model` to a folder from `python -m spacy_pel train-reranker`")
        if self.model.config.precision != self.precision or str(self.model.device_) != self.device:
            self.model.config.precision = self.precision
            self.model.to_device(self.device)
        return self.model

    def to_disk(self, path: Path) -> bool:
        if self.model is None:
            return False
        self.model.save(path / RERANKER_DIR)
        return True

    def from_disk(self, path: Path) -> bool:
        if not (path / RERANKER_DIR).exists():
            return False
        self.model = CrossEncoder.from_pretrained(path / RERANKER_DIR)
        return True

    # ------------------------------------------------------------------ the rule
    def targets(self, batch: CandidateBatch) -> List[int]:
        """The mentions to re-rank: open, not matched by name (with ``skip_matched``), > 1 candidate."""
        matched = batch.matched if self.skip_matched else set()
        return [i for i in range(len(batch.texts))
                if batch.open(i) and i not in matched and int((batch.rows[i] >= 0).sum()) > 1]

    def __call__(self, batch: CandidateBatch) -> None:
        targets = self.targets(batch)
        if not targets:
            return
        model, entities, flat = self._ready(), batch.index.entities, _flat_spans(batch)
        mentions, cands = [], []
        for i in targets:
            doc, a, b = flat[i]
            span = doc[a:b]
            mentions.append(Mention(doc.text, span.start_char, span.end_char))
            m = min(self.candidates, int((batch.rows[i] >= 0).sum()))
            cands.append([entities[int(r)] for r in batch.rows[i, :m]])
        t0 = time.perf_counter()
        ce_scores = model.score_candidates(mentions, cands, self.batch_size)
        self.stats["seconds"] += time.perf_counter() - t0
        self.stats["mentions"] += len(targets)
        self.stats["pairs"] += sum(len(c) for c in cands)
        for i, ce in zip(targets, ce_scores):
            self._reorder(batch, i, ce)

    def _reorder(self, batch: CandidateBatch, i: int, ce: np.ndarray) -> None:
        m = len(ce)
        retriever, rows = batch.scores[i, :m].copy(), batch.rows[i, :m].copy()
        key = ce.astype(np.float64) + self.retriever_weight * retriever
        order = np.argsort(-key, kind="stable")
        batch.rows[i, :m] = rows[order]
        if self.score == "retriever":
            batch.scores[i, :m] = retriever[order]
        else:
            p = np.exp(key - key.max())
            batch.scores[i, :m] = (p / p.sum())[order]
            batch.scores[i, m:] = 0.0


@registry.misc("spacy_pel.rules.rerank.v1")
def rerank_rule(model: Optional[str] = None, candidates: int = 16, batch_size: int = 128, precision: str = "fp32",
                retriever_weight: float = 0.0, score: str = "retriever", skip_matched: bool = True) -> RerankRule:
    """Re-order the first ``candidates`` candidates of the mentions the other rules leave open by a
    cross-encoder (``model``: a folder from ``python -m spacy_pel train-reranker``)."""
    return RerankRule(model, candidates, batch_size, precision, retriever_weight, score, skip_matched)
