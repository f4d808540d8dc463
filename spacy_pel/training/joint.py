"""Joint end-to-end training (SPEC §2): ``python -m spacy_pel.train_e2e CONFIG --output DIR``.

One pass of the mention transformer per document (:func:`spacy_pel.spans.encode_docs`, with the
graph kept) feeds two losses that train it together with the span scorer:

* span detection: binary cross-entropy over every enumerated span of ≤ ``spans.max_len`` tokens
  (gold spans positive, all others negative), weighted by ``spans.weight``;
* linking: each gold span's mean-pooled vector (:func:`spacy_pel.spans.span_link_vectors`, exactly
  what ``pel_linker`` uses with ``collective`` / ``find_spans``) against the KB's stored entity
  vectors, with the retriever trainer's losses and negatives (``sampled`` random/mixed-p hard, or
  ``kb`` = softmax over the whole KB).

The entity tower stays frozen, as in the retriever trainer's CPU default, so the KB built with the
base encoder stays valid. Every ``eval_every`` steps the strict end-to-end F1 (span + id) on
``eval_docs`` dev documents picks the best model (``DIR/best``: encoder folder with
``span_scorer.safetensors``); ``DIR/last`` is a resumable checkpoint. At the end the span threshold
γ with the best span F1 on those dev documents is written to ``DIR/best/span_report.json``.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import List, Optional, Sequence, Set, Tuple

import numpy as np
import spacy
import torch
from tqdm.auto import tqdm

from ..corpora import NIL, gold_ids, gold_spans, read_docbin
from ..models.encoder import BiEncoder
from ..evaluation.metrics import prf
from ..retrieval.index import EntityIndex
from ..training.losses import LOSSES, make_loss
from ..training.negatives import HardNegativeMiner
from ..models.doc_encoder import encode_docs, enumerate_doc_spans, span_link_vectors, span_means
from ..models.span_scorer import SpanScorer, greedy_non_overlapping, load_span_scorer, save_span_scorer
from ..training.retriever import linear_schedule, load_checkpoint, run_config, save_checkpoint, whole_kb_scores

SCORER_FILE = "span_scorer.safetensors"
MAX_LINKED = 200  # per dev doc, most probable spans linked during evaluation (an unlinked kept span counts as wrong)
THRESHOLDS = [0.05, *np.round(np.arange(0.1, 0.95, 0.05), 2).tolist()]


class DocExample:
    """A document's enumerated spans, their 0/1 labels, and its gold spans with KB rows."""

    def __init__(self, doc, index: EntityIndex, max_len: int):
        self.doc = doc
        self.starts, self.ends = enumerate_doc_spans(doc, max_len, skip_punct=False)
        where = {(int(s), int(e)): i for i, (s, e) in enumerate(zip(self.starts, self.ends))}
        self.labels = np.zeros(len(self.starts), np.float32)
        self.linked: List[Tuple[int, int, Set[int]]] = []  # (start, end, gold rows) of in-KB gold spans
        self.gold: List[Tuple[int, int, Set[str]]] = []  # every gold span with its ids, for scoring
        for span in gold_spans(doc):
            i = where.get((span.start, span.end))
            if i is not None:
                self.labels[i] = 1.0
            ids = gold_ids(span.kb_id_)
            self.gold.append((span.start, span.end, set(ids)))
            rows = {index.row[x] for x in ids if x in index.row}
            if ids != [NIL] and rows:
                self.linked.append((span.start, span.end, rows))


class E2ETrainer:
    def __init__(self, cfg: dict, output: Path):
        self.cfg, self.output = cfg, output
        t, p, sp = cfg["training"], cfg["paths"], cfg["spans"]
        self.seed = int(t["seed"])
        torch.manual_seed(self.seed)
        last = output / "last"
        self.resuming = bool(t.get("resume", True)) and (last / "state.json").exists()
        source = str(last / "encoder") if self.resuming else str(cfg["encoder"]["base"])
        self.encoder = BiEncoder.from_pretrained(source).to_device(t.get("device", "auto"))
        self.index = EntityIndex.from_disk(p["kb"])
        self.index.check_encoder(self.encoder)
        self.encoder.entity_model.requires_grad_(False)
        name = cfg["loss"]["name"]
        if name not in LOSSES:
            raise ValueError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}")
        self.loss = make_loss(name, **{k: v for k, v in cfg["loss"].items() if k in LOSSES[name].defaults})
        self.table = torch.from_numpy(self.index.embeddings.astype(np.float32)).to(self.encoder.device_)
        neg = cfg["negatives"]
        self.kind, self.k = str(neg["kind"]), int(neg["count"])
        if self.kind not in ("sampled", "kb"):
            raise ValueError(f'negatives.kind must be "sampled" or "kb" for end-to-end training, not {self.kind!r}')
        self.miner = HardNegativeMiner(self.k, float(neg["hard_fraction"]), seed=self.seed, n_entities=len(self.index))
        if self.kind == "sampled" and self.miner.hard_fraction > 0:
            self.miner.refresh(self.index.embeddings.astype(np.float32))
        self.max_len, self.span_weight = int(sp["max_len"]), float(sp["weight"])
        hidden = int(self.encoder.mention_model.config.hidden_size)
        self.scorer = (load_span_scorer(last / SCORER_FILE) if self.resuming else SpanScorer(hidden)).to(self.encoder.device_)
        nlp = spacy.blank("en")
        self.train_docs = [DocExample(d, self.index, self.max_len) for d in read_docbin(nlp, p["train"])]
        dev = read_docbin(nlp, p["dev"]) if p.get("dev") else []
        self.dev_docs = [DocExample(d, self.index, self.max_len) for d in dev[: int(t["eval_docs"]) or len(dev)]]
        self.batch_docs = int(t["batch_docs"])
        per_epoch = math.ceil(len(self.train_docs) / self.batch_docs)
        self.total = int(t["max_steps"]) or int(float(t["epochs"]) * per_epoch)
        self.warm = max(1, int(float(t["warmup"]) * self.total))
        self.optimizer = torch.optim.AdamW(
            [
                {"params": [q for q in self.encoder.mention_model.parameters() if q.requires_grad], "lr": float(t["lr"])},
                {"params": list(self.scorer.parameters()), "lr": float(t["scorer_lr"])},
            ],
            weight_decay=float(t.get("weight_decay", 0.01)),
        )
        self.base_lrs = [float(t["lr"]), float(t["scorer_lr"])]
        self.state = {"step": 0, "best": -1.0, "best_step": 0, "history": [], "train_seconds": 0.0}
        if self.resuming:
            self.state.update(load_checkpoint(last, self.optimizer))

    def schedule(self, step: int) -> float:
        return linear_schedule(step, self.warm, self.total)

    # ------------------------------------------------------------------ losses
    def link_loss(self, m: torch.Tensor, gold: List[Set[int]]) -> torch.Tensor:
        positives = torch.tensor([min(g) for g in gold], device=m.device)
        pos_s = self.loss.scores(m, self.table[positives])
        if self.kind == "kb":
            neg_s, mask = whole_kb_scores(m, self.table, gold, self.loss.kind)
            return self.loss.from_scores(pos_s, neg_s, mask)
        rows = self.miner.sample(m.detach().float().cpu().numpy(), gold)
        neg = self.table[torch.from_numpy(rows).to(m.device)]
        return self.loss.from_scores(pos_s, self.loss.scores(m, neg))

    def loss_vectors(self, m: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(m, dim=-1) if self.loss.kind == "cosine" else m

    def step_loss(self, batch: Sequence[DocExample]) -> Tuple[torch.Tensor, float, float]:
        hidden = encode_docs(self.encoder, [b.doc for b in batch], batch_size=len(batch), grad=True)
        logits, labels, vecs, gold = [], [], [], []
        for ex, H in zip(batch, hidden):
            if len(ex.starts):
                logits.append(self.scorer(H, ex.starts, ex.ends))
                labels.append(torch.from_numpy(ex.labels).to(H.device))
            if ex.linked:
                st = [s for s, _, _ in ex.linked]
                en = [e for _, e, _ in ex.linked]
                # as in the retriever trainer: raw means for a dot-product loss (a normalised query
                # would cap its logits at ±1), unit vectors for a cosine one; rankings are the same
                vecs.append(span_means(H, st, en))
                gold.extend(rows for _, _, rows in ex.linked)
        span_loss = (
            torch.nn.functional.binary_cross_entropy_with_logits(torch.cat(logits), torch.cat(labels))
            if logits else torch.zeros((), device=self.encoder.device_)
        )
        link_loss = self.link_loss(self.loss_vectors(torch.cat(vecs)), gold) if vecs else torch.zeros((), device=self.encoder.device_)
        return link_loss + self.span_weight * span_loss, float(link_loss.detach()), float(span_loss.detach())

    # ------------------------------------------------------------------ evaluation
    def dev_predictions(self) -> List[dict]:
        """Per dev doc: span probabilities and each span's top KB row (all enumerated spans)."""
        out = []
        hidden = encode_docs(self.encoder, [d.doc for d in self.dev_docs])
        with torch.no_grad():
            for ex, H in zip(self.dev_docs, hidden):
                if not len(ex.starts):
                    out.append({"probs": np.zeros(0), "rows": np.zeros(0, np.int64)})
                    continue
                probs = self.scorer.probs(H, ex.starts, ex.ends).cpu().numpy()
                # only spans that some threshold could keep, and the gold spans, are linked
                where = {(int(s), int(e)): i for i, (s, e) in enumerate(zip(ex.starts, ex.ends))}
                gold = [where[(s, e)] for s, e, _ in ex.gold if (s, e) in where]
                likely = np.flatnonzero(probs > min(THRESHOLDS))
                likely = likely[np.argsort(-probs[likely], kind="stable")[:MAX_LINKED]]
                linked = np.union1d(likely, np.asarray(gold, np.int64))
                rows = np.full(len(probs), -1, np.int64)
                if len(linked):
                    vecs = span_link_vectors(self.encoder, H, ex.starts[linked], ex.ends[linked]).cpu().numpy()
                    rows[linked] = self.index.search(vecs, 1)[1][:, 0]
                out.append({"probs": probs, "rows": rows})
        return out

    def dev_scores(self, preds: List[dict], threshold: float) -> dict:
        """Strict span F1, strict end-to-end F1 (span + id) and gold-span recall@1 on the dev docs."""
        span_tp = link_tp = n_pred = n_gold = hits = n_linked = 0
        for ex, pr in zip(self.dev_docs, preds):
            where = {(int(s), int(e)): i for i, (s, e) in enumerate(zip(ex.starts, ex.ends))}
            gold = {(s, e): ids for s, e, ids in ex.gold}
            keep = np.flatnonzero(pr["probs"] > threshold)
            chosen = keep[greedy_non_overlapping(ex.starts[keep], ex.ends[keep], pr["probs"][keep])] if len(keep) else keep
            n_pred, n_gold = n_pred + len(chosen), n_gold + len(gold)
            for i in chosen:
                ids = gold.get((int(ex.starts[i]), int(ex.ends[i])))
                if ids is not None:
                    span_tp += 1
                    link_tp += int(pr["rows"][i] >= 0 and self.index.entities[int(pr["rows"][i])].id in ids)
            for s, e, rows in ex.linked:
                i = where.get((s, e))
                n_linked += 1
                hits += int(i is not None and int(pr["rows"][i]) in rows)
        return {"threshold": threshold, "span": prf(span_tp, n_pred, n_gold), "strict": prf(link_tp, n_pred, n_gold),
                "gold_span_R@1": round(hits / max(n_linked, 1), 4)}

    def evaluate_and_save(self, losses: Tuple[float, float], seconds: float) -> None:
        self.state["train_seconds"] += seconds
        scores = self.dev_scores(self.dev_predictions(), 0.5) if self.dev_docs else {"strict": {"f": float("nan")}}
        self.encoder.train()
        self.encoder.entity_model.eval()
        f = scores["strict"]["f"]
        self.state["history"].append({"step": self.state["step"], "link_loss": round(losses[0], 4),
                                      "span_loss": round(losses[1], 4), "dev": scores})
        if f > self.state["best"] or not (self.output / "best").exists():
            self.state["best"], self.state["best_step"] = f, self.state["step"]
            self.encoder.save(self.output / "best")
            save_span_scorer(self.scorer, self.output / "best" / SCORER_FILE)
        save_checkpoint(self.output / "last", self.encoder, self.optimizer, self.state)
        save_span_scorer(self.scorer, self.output / "last" / SCORER_FILE)
        (self.output / "train_log.json").write_text(json.dumps(self.state, indent=2), encoding="utf8")

    def choose_threshold(self) -> dict:
        """γ with the best strict span F1 on the dev docs, for the best model; written next to it."""
        best = self.output / "best"
        self.encoder = BiEncoder.from_pretrained(best).to_device(str(self.encoder.device_))
        self.scorer = load_span_scorer(best / SCORER_FILE, device=str(self.encoder.device_))
        preds = self.dev_predictions()
        grid = [self.dev_scores(preds, t) for t in THRESHOLDS]
        chosen = max(grid, key=lambda r: r["span"]["f"])
        report = {"threshold": chosen["threshold"], "dev_docs": len(self.dev_docs), "dev": chosen,
                  "max_len": self.max_len, "best_step": self.state["best_step"]}
        (best / "span_report.json").write_text(json.dumps(report, indent=2), encoding="utf8")
        return report

    # ------------------------------------------------------------------ loop
    def run(self, progress: bool = True) -> dict:
        t = self.cfg["training"]
        eval_every, clip = int(t["eval_every"]), float(t["grad_clip"])
        per_epoch = math.ceil(len(self.train_docs) / self.batch_docs)
        self.encoder.train()
        self.encoder.entity_model.eval()
        bar = tqdm(total=self.total, initial=self.state["step"], desc="e2e training", disable=not progress)
        t0, link_l, span_l = time.perf_counter(), [], []
        params = [q for g in self.optimizer.param_groups for q in g["params"]]
        for step in range(self.state["step"], self.total):
            epoch, offset = divmod(step, per_epoch)
            order = np.random.default_rng(self.seed + 1000 * epoch).permutation(len(self.train_docs))
            batch = [self.train_docs[i] for i in order[offset * self.batch_docs : (offset + 1) * self.batch_docs]]
            for group, lr in zip(self.optimizer.param_groups, self.base_lrs):
                group["lr"] = lr * self.schedule(step)
            loss, ll, sl = self.step_loss(batch)
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, clip)
            self.optimizer.step()
            link_l.append(ll)
            span_l.append(sl)
            self.state["step"] = step + 1
            bar.update(1)
            bar.set_postfix(link=f"{np.mean(link_l[-20:]):.3f}", span=f"{np.mean(span_l[-20:]):.4f}", dev_f=f"{self.state['best']:.3f}")
            if self.state["step"] % eval_every == 0 or self.state["step"] == self.total:
                self.evaluate_and_save((float(np.mean(link_l[-eval_every:])), float(np.mean(span_l[-eval_every:]))),
                                       time.perf_counter() - t0)
                t0 = time.perf_counter()
        bar.close()
        if not (self.output / "best").exists():
            self.evaluate_and_save((float("nan"), float("nan")), 0.0)
        self.state["span_report"] = self.choose_threshold() if self.dev_docs else None
        (self.output / "train_log.json").write_text(json.dumps(self.state, indent=2), encoding="utf8")
        return self.state


def train_e2e(config: Path, output: Path, overrides: Optional[dict] = None, progress: bool = True) -> dict:
    """Train as ``config`` says; returns the final state (steps, best dev strict F1, history, γ)."""
    return run_config(E2ETrainer, config, output, overrides, progress)
