"""Train the cross-encoder re-ranker (:mod:`spacy_pel.models.cross_encoder`) on the retriever's own
hard candidates.

1. Mining (once, cached in ``OUT/candidates.npz`` + ``OUT/candidates.json``, written atomically and
   reused while the encoder, KB, corpus and settings are the same): every gold mention of the
   training corpus whose id is in the KB is encoded by the bi-encoder (``mining_context`` word
   pieces, as the pipeline does) and its top ``candidates`` entities retrieved; a gold entity
   missing from the list replaces the last candidate.
2. Training (:class:`~spacy_pel.training.loop.TrainingLoop`: resumable from ``OUT/last``, linear
   warm-up/decay, gradient clipping, a progress bar): each step scores ``batch_mentions`` mentions
   against all their candidates and minimises the listwise softmax cross-entropy
   ``-log Σ_gold softmax(scores)``. Mentions whose gold is not the retriever's first are seen
   ``hard_repeat`` times an epoch. The last ``held_out_docs`` documents are not trained on: the
   model with the best held-out R@1 is kept in ``OUT/best``.
3. At the end, on the held-out mentions, the re-ranker alone and combined with the retriever
   (order by ``score + w · retriever score`` for each ``w`` of ``retriever_weights``) are measured;
   ``OUT/rerank_report.json`` has the figures and the best ``w`` (the rule's ``retriever_weight``).
"""
from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import spacy
import torch

from ..corpora import gold_spans, read_docbin
from ..evaluation.evaluators import Evaluator
from ..files import InputError, atomic_write, file_digest, folder_digest, json_text
from ..models.cross_encoder import CrossEncoder
from ..models.encoder import DEFAULT_ENCODER, BiEncoder, Mention
from ..pipeline.updating import check_linkable, linkable_mentions
from ..retrieval.index import EntityIndex
from .config import LoopSettings
from .loop import StepOutput, Task, TrainingLoop, checkpoint_to_resume

PathLike = Union[str, Path]
MINED_ARRAYS, MINED_META = "candidates.npz", "candidates.json"
REPORT_FILE = "rerank_report.json"


@dataclass
class RerankerConfig:
    """Settings of :func:`train_reranker` (the CLI's options)."""

    base: str = DEFAULT_ENCODER  # a Hugging Face model or a saved cross-encoder folder to start from
    candidates: int = 16  # retriever candidates per mention (gold forced in)
    mention_max_length: int = 48
    entity_max_length: int = 24
    pooling: str = "mean"
    lr: float = 3e-5
    weight_decay: float = 0.01
    batch_mentions: int = 4
    max_steps: int = 600
    warmup: float = 0.1
    hard_repeat: int = 4
    held_out_docs: int = 25
    eval_every: int = 200
    seed: int = 0
    mining_context: int = 64
    mining_batch_size: int = 64
    retriever_weights: List[float] = field(default_factory=lambda: [0.0, 2.0, 5.0, 10.0, 20.0, 40.0])

    def __post_init__(self):
        for name in ("candidates", "batch_mentions", "max_steps", "mining_context", "mining_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"reranker: `{name}` must be ≥ 1, not {getattr(self, name)!r}")
        if self.candidates < 2:
            raise ValueError("reranker: `candidates` must be ≥ 2 (one list of candidates to order)")
        if self.hard_repeat < 1 or self.held_out_docs < 0:
            raise ValueError("reranker: `hard_repeat` must be ≥ 1 and `held_out_docs` ≥ 0")
        for name in ("lr", "weight_decay", "eval_every", "seed"):  # eval_every 0: at the end only
            if not getattr(self, name) >= 0:
                raise ValueError(f"reranker: `{name}` must be ≥ 0, not {getattr(self, name)!r}")
        if not 0.0 <= self.warmup <= 1.0:
            raise ValueError(f"reranker: `warmup` must be within [0, 1], not {self.warmup!r}")
        if self.pooling not in ("mean", "cls"):  # the cross-encoder's poolings
            raise ValueError(f"reranker: `pooling` must be 'mean' or 'cls', not {self.pooling!r}")
        for name in ("mention_max_length", "entity_max_length", "mining_context"):  # the encoders' least budget
            if getattr(self, name) < 8:
                raise ValueError(f"reranker: `{name}` must be at least 8 word pieces, not {getattr(self, name)!r}")


# ------------------------------------------------------------------ mining
@dataclass
class Mined:
    """Mentions (``doc``, ``start``, ``end`` char offsets into ``texts[doc]``) and their candidates:
    KB ``rows``/retriever ``scores`` ``[n, k]`` best first, ``gold`` ``[n, k]`` which are gold."""

    texts: List[str]
    mentions: List[Tuple[int, int, int]]
    rows: np.ndarray
    scores: np.ndarray
    gold: np.ndarray

    def __len__(self) -> int:
        return len(self.mentions)

    def mention(self, i: int) -> Mention:
        doc, start, end = self.mentions[i]
        return Mention(self.texts[doc], start, end)

    def save(self, folder: Path, stamp: dict) -> None:
        def arrays(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.savez(f, rows=self.rows, scores=self.scores, gold=self.gold)

        atomic_write(folder / MINED_ARRAYS, arrays)
        meta = json.dumps({"stamp": stamp, "texts": self.texts, "mentions": self.mentions})
        atomic_write(folder / MINED_META, lambda tmp: tmp.write_text(meta, encoding="utf8"))

    @classmethod
    def load(cls, folder: Path, stamp: dict) -> Optional["Mined"]:
        """The cached candidates, or None if there are none or they were mined from something else."""
        if not (folder / MINED_ARRAYS).exists() or not (folder / MINED_META).exists():
            return None
        meta = json.loads((folder / MINED_META).read_text(encoding="utf8"))
        if meta.get("stamp") != stamp:
            return None
        with np.load(folder / MINED_ARRAYS, allow_pickle=False) as data:
            arrays = {k: data[k] for k in ("rows", "scores", "gold")}
        return cls(meta["texts"], [tuple(m) for m in meta["mentions"]], **arrays)


def mine_candidates(encoder: BiEncoder, index: EntityIndex, docs: Sequence, k: int, batch_size: int = 64,
                    progress: bool = True, source: str = "the training corpus") -> Mined:
    """The retriever's top ``k`` for every gold mention of ``docs`` with an in-KB id (gold forced in);
    ``source`` names the corpus in :func:`~spacy_pel.pipeline.updating.check_linkable`'s refusal."""
    texts, where, mentions, gold_rows = [], [], [], []
    skipped: Counter = Counter()
    for d, doc in enumerate(docs):
        texts.append(doc.text)
        found, rows_d, skipped_d = linkable_mentions(((doc.text, s.start_char, s.end_char, s.kb_id_) for s in gold_spans(doc)),
                                                     index.lookup)
        mentions.extend(found)
        gold_rows.extend(rows_d)
        where.extend((d, m.start, m.end) for m in found)
        skipped.update(skipped_d)
    check_linkable(source, len(mentions), skipped, len(index))
    vectors = encoder.encode_mentions(mentions, batch_size=batch_size, progress=progress)
    scores, rows = index.search(vectors, k)
    scores, rows = scores.astype(np.float32), rows.astype(np.int64)
    gold = np.zeros(rows.shape, dtype=bool)
    for i, rows_i in enumerate(gold_rows):
        gold[i] = np.isin(rows[i], sorted(rows_i))
        if not gold[i].any():  # force the gold entity in, in place of the last candidate
            row = min(rows_i)
            rows[i, -1] = row
            scores[i, -1] = float(index.embeddings[row].astype(np.float32) @ vectors[i])
            gold[i, -1] = True
    return Mined(texts, where, rows, scores, gold)


def mining_stamp(cfg: RerankerConfig, encoder: PathLike, kb: PathLike, corpus: PathLike) -> dict:
    """What the cached candidates depend on: the encoder's contents (a folder; else its name), the KB,
    the corpus's contents and the mining settings."""
    kb_meta = Path(kb) / "meta.json"
    retriever = folder_digest(encoder) if Path(encoder).is_dir() else str(encoder)
    return {"encoder": retriever, "kb": str(kb), "kb_meta": file_digest(kb_meta) if kb_meta.exists() else None,
            "corpus": file_digest(corpus), "candidates": cfg.candidates, "mining_context": cfg.mining_context}


# ------------------------------------------------------------------ scoring and evaluation
def listwise_loss(scores: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Mean over mentions of ``-log Σ_gold softmax(scores)`` (``scores``, ``gold``: ``[B, k]``)."""
    positive = scores.masked_fill(~gold, float("-inf"))
    return (torch.logsumexp(scores, -1) - torch.logsumexp(positive, -1)).mean()


def rerank_order(ce_scores: np.ndarray, retriever_scores: np.ndarray, weight: float) -> np.ndarray:
    """Candidate positions best first, by ``ce + weight · retriever`` (stable: ties keep retrieval order)."""
    return np.argsort(-(ce_scores + weight * retriever_scores), axis=-1, kind="stable")


def mined_pairs(model: CrossEncoder, index: EntityIndex, mined: Mined, idx: Sequence[int]) -> list:
    """The (ids, mention-side length) pairs of mentions ``idx`` with all their candidates, flat."""
    sides = model.mention_sides([mined.mention(i) for i in idx])
    pairs = []
    for side, i in zip(sides, idx):
        pairs.extend(model.pair_inputs(side, model.entity_sides([index.entities[int(r)] for r in mined.rows[i]])))
    return pairs


def recall_at_1(order: np.ndarray, gold: np.ndarray) -> float:
    return float(gold[np.arange(len(gold)), order[:, 0]].mean()) if len(gold) else float("nan")


class RerankEvaluator(Evaluator):
    """R@1 of the re-ranker alone over mined candidates (``idx``: the mentions to use); the
    retriever's own R@1 on them is logged beside it."""

    primary_metric = "rerank_r1"

    def __init__(self, index: EntityIndex, mined: Mined, idx: Sequence[int], batch_size: int = 128):
        self.index, self.mined, self.idx, self.batch_size = index, mined, list(idx), batch_size
        self.last: Optional[np.ndarray] = None  # the scores of the last call, [len(idx), k]

    def __call__(self, model: CrossEncoder) -> Dict[str, Any]:
        if not self.idx:
            return {"rerank_r1": float("nan"), "retriever_r1": float("nan")}
        k = self.mined.rows.shape[1]
        flat = model.score_lists(mined_pairs(model, self.index, self.mined, self.idx), self.batch_size)
        self.last = flat.reshape(len(self.idx), k)
        gold = self.mined.gold[self.idx]
        return {"rerank_r1": recall_at_1(rerank_order(self.last, self.mined.scores[self.idx], 0.0), gold),
                "retriever_r1": recall_at_1(np.tile(np.arange(k), (len(self.idx), 1)), gold)}

    def weights(self, weights: Sequence[float]) -> Dict[str, float]:
        """Held-out R@1 of ``score + w · retriever score`` for each ``w`` (after a call)."""
        gold, retr = self.mined.gold[self.idx], self.mined.scores[self.idx]
        return {str(w): recall_at_1(rerank_order(self.last, retr, w), gold) for w in weights}


# ------------------------------------------------------------------ training
class RerankerTask(Task):
    """The cross-encoder as a :class:`~spacy_pel.training.loop.Task` over mined candidates."""

    description = "re-ranker"

    def __init__(self, cfg: RerankerConfig, index: EntityIndex, mined: Mined, checkpoint: Optional[Path] = None):
        torch.manual_seed(cfg.seed)
        self.cfg, self.index, self.mined = cfg, index, mined
        source = checkpoint if checkpoint is not None else cfg.base
        lengths = {} if checkpoint is not None else {"mention_max_length": cfg.mention_max_length,
                                                      "entity_max_length": cfg.entity_max_length, "pooling": cfg.pooling}
        self.ce = CrossEncoder.from_pretrained(source, **lengths, precision="fp32")
        self.device = self.ce.device_
        n_docs = len(mined.texts)
        held = set(range(max(0, n_docs - cfg.held_out_docs), n_docs))
        self.train_idx = [i for i, (d, _, _) in enumerate(mined.mentions) if d not in held]
        self.held_idx = [i for i, (d, _, _) in enumerate(mined.mentions) if d in held]
        if len(self.train_idx) < cfg.batch_mentions:
            raise InputError(f"the re-ranker has {len(self.train_idx)} training mentions with an in-KB id (the last "
                             f"{cfg.held_out_docs} documents held out), fewer than one step's batch_mentions "
                             f"({cfg.batch_mentions}): give it a larger corpus, or lower held_out_docs / batch_mentions")
        self.hard = [i for i in self.train_idx if not mined.gold[i, 0]]
        self.evaluator = RerankEvaluator(index, mined, self.held_idx)
        self.total_steps = cfg.max_steps
        self.sides = dict(zip(self.train_idx, self.ce.mention_sides([mined.mention(i) for i in self.train_idx])))

    @property
    def model(self) -> CrossEncoder:
        return self.ce

    def optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.ce.parameters(), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)

    def epoch_order(self, rng: np.random.Generator) -> np.ndarray:
        """One epoch: every training mention once, those the retriever gets wrong ``hard_repeat`` times."""
        pool = np.array(self.train_idx + self.hard * (self.cfg.hard_repeat - 1), dtype=np.int64)
        return rng.permutation(pool)

    def batches(self, start: int) -> Iterator[List[int]]:
        rng = np.random.default_rng(self.cfg.seed)
        b, step = self.cfg.batch_mentions, 0
        while True:
            order = self.epoch_order(rng)
            for a in range(0, len(order) - b + 1, b):
                if step >= self.total_steps:
                    return
                if step >= start:
                    yield order[a : a + b].tolist()
                step += 1

    def train_mode(self) -> None:
        self.ce.train()

    def step(self, batch: List[int]) -> StepOutput:
        pairs = []
        for i in batch:
            pairs.extend(self.ce.pair_inputs(self.sides[i], self.ce.entity_sides([self.index.entities[int(r)] for r in self.mined.rows[i]])))
        scores = self.ce.score(pairs).view(len(batch), -1)
        gold = torch.from_numpy(self.mined.gold[batch]).to(scores.device)
        loss = listwise_loss(scores, gold)
        return StepOutput(loss, {"loss": float(loss.detach())})

    def save(self, folder: Path) -> None:
        self.ce.write(folder)

    def finish(self, output: Path, state: Dict[str, Any]) -> None:
        """Measure the best model on the held-out mentions, alone and combined with the retriever."""
        self.ce = CrossEncoder.from_pretrained(output / "best")
        metrics = self.evaluator(self.ce)
        by_weight = self.evaluator.weights(self.cfg.retriever_weights) if self.held_idx else {}
        best_w = max(by_weight, key=lambda w: (by_weight[w], -float(w))) if by_weight else "0.0"
        state["held_out"] = {**metrics, "by_retriever_weight": by_weight, "best_retriever_weight": float(best_w),
                             "mentions": len(self.held_idx)}


def _fingerprint(cfg: RerankerConfig) -> str:
    return hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True).encode()).hexdigest()[:16]


def train_reranker(cfg: RerankerConfig, encoder: PathLike, kb: PathLike, train: PathLike, output: PathLike,
                   docs: Optional[Sequence] = None, progress: bool = True, resume: bool = True) -> Dict[str, Any]:
    """Mine (or reuse) the candidates, train, and write ``OUT/best`` (the cross-encoder) and
    ``OUT/rerank_report.json``; returns the report. ``docs``: the training corpus's docs if already
    read (else read from ``train``). ``resume`` continues from ``OUT/last`` when it is there."""
    from_disk = docs is None
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    index = EntityIndex.from_disk(kb)
    stamp = mining_stamp(cfg, encoder, kb, train)
    mined = Mined.load(output, stamp)
    mined_now = mined is None
    if mined is None:
        if from_disk:
            docs = read_docbin(spacy.blank("en"), train)
        bi = BiEncoder.from_pretrained(encoder, mention_max_length=cfg.mining_context)
        index.check_encoder(bi)  # candidates searched with another encoder's vectors would mean nothing
        mined = mine_candidates(bi, index, docs, cfg.candidates, cfg.mining_batch_size, progress, source=str(train))
        mined.save(output, stamp)
    mine_s = time.perf_counter() - t0
    checkpoint = checkpoint_to_resume(output, resume)
    task = RerankerTask(cfg, index, mined, checkpoint)
    settings = LoopSettings(warmup=cfg.warmup, eval_every=cfg.eval_every, resume=resume)
    state = TrainingLoop(task, settings, output, checkpoint).run(progress)
    report = {"config": asdict(cfg), "config_id": _fingerprint(cfg), "mentions": len(mined),
              "train_mentions": len(task.train_idx), "hard_train_mentions": len(task.hard),
              "mined_now": mined_now, "mining_s": round(mine_s, 1), "train_s": round(state["train_seconds"], 1),
              "steps": state["step"], "best_step": state["best_step"], "held_out": state.get("held_out", {})}
    text = json_text(report, indent=2)
    atomic_write(output / REPORT_FILE, lambda tmp: tmp.write_text(text, encoding="utf8"))
    return report
