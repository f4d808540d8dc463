"""``python -m spacy_pel.train_spans``: train the end-to-end span scorer (SPEC §2).

Token vectors come from one pass of the encoder's mention transformer over each document
(:func:`spacy_pel.models.doc_encoder.encode_docs`); every span of at most ``max_len`` tokens is scored
``σ(w_sᵀh_i + w_eᵀh_j + Σ w_mᵀh_q)`` and trained with binary cross-entropy (gold spans positive,
all other enumerated spans negative). This trainer keeps the transformer frozen — the scorer alone
learns, in seconds on a CPU, from token vectors computed once — and then picks the threshold γ
with the best strict span F1 on the dev corpus. (The paper trains the transformer jointly with the
linking loss: :mod:`spacy_pel.training.joint`.)

It runs in the package's training loop (:mod:`spacy_pel.training.loop`): one document a step,
Adam at a constant learning rate, no clipping, evaluated at the end (``OUTPUT/best``,
``OUTPUT/last``); the scorer and its report are then written to ``OUTPUT/span_scorer.safetensors``
and ``OUTPUT/span_report.json``, where ``pel_linker`` reads them.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..corpora import gold_spans
from ..evaluation.evaluators import SpanEvaluator, SpanExample, detect
from ..files import atomic_write, json_text
from ..models.doc_encoder import MAX_SPAN_LEN, blank_tokens, encode_docs, enumerate_doc_spans
from ..models.encoder import BiEncoder
from ..models.span_scorer import SCORER_FILE, SpanScorer, load_span_scorer, save_span_scorer
from .config import LoopSettings
from .loop import StepOutput, Task, TrainingLoop, checkpoint_to_resume

__all__ = ["SpanScorerTask", "detect", "span_examples", "train_span_scorer"]


def span_examples(encoder: BiEncoder, docs, max_len: int) -> Tuple[List[SpanExample], Dict[str, int]]:
    """Per doc: token vectors, enumerated spans and their labels; counts of gold spans and of those
    not enumerable (longer than ``max_len``, not on token boundaries, or with an edge without word pieces)."""
    hidden = encode_docs(encoder, docs)
    out, missed, total = [], 0, 0
    for doc, H in zip(docs, hidden):
        starts, ends = enumerate_doc_spans(doc, max_len, blank=blank_tokens(H))  # as the span finder enumerates them
        index = {(int(s), int(e)): i for i, (s, e) in enumerate(zip(starts, ends))}
        labels = np.zeros(len(starts), np.float32)
        for span in gold_spans(doc):
            total += 1
            i = index.get((span.start, span.end))
            if i is None:
                missed += 1
            else:
                labels[i] = 1.0
        out.append(SpanExample(H, starts, ends, labels))
    return out, {"gold_spans": total, "not_enumerable": missed}


class SpanScorerTask(Task):
    """A span scorer over frozen token vectors as a :class:`~spacy_pel.training.loop.Task`."""

    description = "span scorer"

    def __init__(self, encoder: BiEncoder, train_docs: Sequence, dev_docs: Sequence, max_len: int = MAX_SPAN_LEN,
                 epochs: int = 8, lr: float = 3e-3, seed: int = 0, checkpoint: Optional[Path] = None):
        torch.manual_seed(seed)
        self.t0 = time.perf_counter()
        self.train, self.train_counts = span_examples(encoder, train_docs, max_len)
        dev, self.dev_counts = span_examples(encoder, dev_docs, max_len)
        self.encode_s = time.perf_counter() - self.t0
        self.evaluator = SpanEvaluator(dev)
        self.device = encoder.device_
        hidden = encoder.mention_model.config.hidden_size
        scorer = load_span_scorer(checkpoint / SCORER_FILE) if checkpoint else SpanScorer(hidden)
        self.scorer = scorer.to(self.device)
        self.max_len, self.epochs, self.lr, self.seed = max_len, epochs, lr, seed
        self.total_steps = epochs * sum(1 for ex in self.train if len(ex.starts))
        self.loss_fn = torch.nn.BCEWithLogitsLoss()
        self.report: Dict[str, Any] = {}

    @property
    def model(self) -> SpanScorer:
        return self.scorer

    def optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.scorer.parameters(), lr=self.lr)

    def batches(self, start: int) -> Iterator[SpanExample]:
        """One document a step, in a fresh order each epoch; documents without spans are skipped."""
        rng = np.random.default_rng(self.seed)
        step = 0
        for _ in range(self.epochs):
            for i in rng.permutation(len(self.train)):
                if len(self.train[i].starts) == 0:
                    continue
                if step >= start:
                    yield self.train[i]
                step += 1

    def step(self, batch: SpanExample) -> StepOutput:
        loss = self.loss_fn(self.scorer(batch.H, batch.starts, batch.ends), torch.from_numpy(batch.labels).to(batch.H.device))
        return StepOutput(loss, {"loss": float(loss.detach())})

    def save(self, folder: Path) -> None:
        save_span_scorer(self.scorer, folder / SCORER_FILE)

    def finish(self, output: Path, state: Dict[str, Any]) -> None:
        """The best scorer and its threshold γ (best span F1 on dev) go to ``output`` itself: the report first,
        both atomically, so a scorer file is never there without its γ (a kill in between leaves the report
        alone, and loading the missing scorer fails; the run's next start clears both)."""
        self.scorer = load_span_scorer(output / "best" / SCORER_FILE, device=str(self.device))
        best = self.evaluator(self.scorer)
        self.report = {"threshold": best["threshold"], "dev_span_strict": best["span"], "train": self.train_counts,
                       "dev": self.dev_counts, "max_len": self.max_len, "encode_s": round(self.encode_s, 1),
                       "total_s": round(time.perf_counter() - self.t0, 1)}
        report = json_text(self.report, indent=2)
        atomic_write(output / "span_report.json", lambda tmp: tmp.write_text(report, encoding="utf8"))
        save_span_scorer(self.scorer, output / SCORER_FILE)


def train_span_scorer(
    encoder: BiEncoder,
    train_docs: Sequence,
    dev_docs: Sequence,
    output: Path,
    max_len: int = MAX_SPAN_LEN,
    epochs: int = 8,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = True,
    resume: bool = False,
) -> Dict[str, Any]:
    """Train a span scorer on ``encoder``'s frozen token vectors; returns the report written to
    ``output/span_report.json`` (γ, dev span P/R/F1, gold-span counts). ``resume`` continues from
    ``output/last`` (by default every call trains from scratch)."""
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    checkpoint = checkpoint_to_resume(output, resume)
    task = SpanScorerTask(encoder, train_docs, dev_docs, max_len, epochs, lr, seed, checkpoint)
    settings = LoopSettings(schedule="constant", grad_clip=0.0, eval_every=0, resume=resume)
    TrainingLoop(task, settings, output, checkpoint).run(progress)
    return task.report
