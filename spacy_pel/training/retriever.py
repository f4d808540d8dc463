"""Retriever training (``python -m spacy_pel.train CONFIG --output DIR``).

Settings come from a spaCy-style config (``configs/train_*.cfg``; see ``configs/README.md``). The
loop: a batch of mentions → mention vectors → negatives (random, in-batch, mixed-p hard, or the
whole KB when the entity tower is frozen) →
proxy or cross-entropy loss (+ λ·FGSM term) → AdamW with linear warm-up/decay. Every
``eval_every`` steps it measures dev recall@1, keeps the best encoder in ``DIR/best`` and a
resumable checkpoint in ``DIR/last`` (weights and optimiser state in safetensors, state in JSON).

Two modes for the entity tower (``[training] train_entity_encoder``):

* ``false`` (CPU default): only the mention encoder learns; entity vectors are the KB's stored
  vectors, so the KB built with the base encoder stays valid (same fingerprint), hard negatives come
  from the full KB index at no cost, and no 354k-entity re-encoding is ever needed;
* ``true`` (the paper): both towers learn; negatives' vectors are re-encoded each step and the
  hard-negative index over ``negatives.pool`` entities is refreshed every ``refresh_every`` steps.

KB synonym pre-alignment (``[synonyms] steps``) treats KB synonyms as mentions of their entity,
before the mention steps (or alone, with ``paths.train = null``).
"""
from __future__ import annotations

import contextlib
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

import faiss
import numpy as np
import spacy
import torch
import torch.nn.functional as F
from confection import Config
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from ..corpora import NIL, gold_ids, gold_spans, read_docbin
from ..discovery.cluster import ROOT, arborescence_positives
from ..files import atomic_dir
from ..models.encoder import BiEncoder, Mention
from ..retrieval.index import EntityIndex
from ..training.losses import LOSSES, fgsm_entity_vectors, make_loss
from ..training.negatives import HardNegativeMiner, RandomNegatives, in_batch

# "sampled": random or mixed-p hard; "in_batch"; "kb": softmax over every KB row (frozen tower only)
NEGATIVE_KINDS = ("sampled", "in_batch", "kb")


def whole_kb_scores(m: torch.Tensor, table: torch.Tensor, gold: Sequence[Set[int]], kind: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """Scores of every mention against every KB row ``[B, N]`` and the non-gold mask ``[B, N]``.

    With a frozen entity tower the KB's vectors are a constant ``table``, so the softmax can run
    over all of it (one ``[B, d] × [d, N]`` product) instead of over sampled negatives. ``kind`` is
    the loss's similarity ("cosine" normalises both sides, "dot" does not).
    """
    if kind == "cosine":
        m, table = F.normalize(m, dim=-1), F.normalize(table, dim=-1)
    scores = m @ table.T
    mask = torch.ones(scores.shape, dtype=torch.bool, device=m.device)
    for i, g in enumerate(gold):
        mask[i, list(g)] = False
    return scores, mask


def linear_schedule(step: int, warm: int, total: int) -> float:
    """Learning-rate factor: linear warm-up over ``warm`` steps, then linear decay to 0 at ``total``."""
    if step < warm:
        return (step + 1) / warm
    return max(0.0, (total - step) / max(1, total - warm))


@dataclass
class Examples:
    """Training examples: encoded mention inputs and the KB rows that are gold for each."""

    inputs: List[Tuple[List[int], Tuple[int, int]]]
    gold: List[Set[int]]

    def __len__(self) -> int:
        return len(self.gold)


def corpus_examples(docs, index: EntityIndex, encoder: BiEncoder) -> Tuple[Examples, Dict[str, int]]:
    """Gold mentions of ``docs`` whose ids are in the KB; NIL and absent ids are counted, not used."""
    mentions, gold, skipped = [], [], {"nil": 0, "absent": 0}
    for doc in docs:
        for span in gold_spans(doc):
            ids = gold_ids(span.kb_id_)
            rows = {index.row[i] for i in ids if i in index.row}
            if ids == [NIL]:
                skipped["nil"] += 1
            elif not rows:
                skipped["absent"] += 1
            else:
                mentions.append(Mention(doc.text, span.start_char, span.end_char))
                gold.append(rows)
    return Examples(encoder.mention_inputs(mentions), gold), skipped


def synonym_examples(index: EntityIndex, encoder: BiEncoder, limit: int, seed: int) -> Examples:
    """KB synonyms (and names, for entities without any) as mentions of their own entity."""
    pairs = [(alias, row) for row, e in enumerate(index.entities) for alias in e.aliases]
    rng = random.Random(seed)
    if limit and len(pairs) > limit:
        pairs = rng.sample(pairs, limit)
    rng.shuffle(pairs)
    mentions = [Mention(text, 0, len(text)) for text, _ in pairs]
    return Examples(encoder.mention_inputs(mentions), [{row} for _, row in pairs])


class ArborescenceTargets:
    """Per-mention positives for the arborescence objective, from a cache of training-mention
    vectors refreshed every ``refresh_every`` steps (a cluster larger than ``max_cluster`` is cut to
    the mention and its ``max_cluster - 1`` nearest coreferent mentions, to bound Edmonds' cost)."""

    def __init__(self, examples: Examples, refresh_every: int, max_cluster: int):
        self.examples, self.refresh_every, self.max_cluster = examples, refresh_every, max_cluster
        self.entity = np.array([min(g) for g in examples.gold], dtype=np.int64)
        self.members: Dict[int, np.ndarray] = {}
        for i, e in enumerate(self.entity):
            self.members.setdefault(int(e), []).append(i)
        self.members = {e: np.array(v, dtype=np.int64) for e, v in self.members.items()}
        self.vectors: Optional[np.ndarray] = None
        self.index = None

    def refresh(self, encoder: BiEncoder, normalize: bool) -> None:
        inputs = self.examples.inputs
        fn = lambda batch: encoder.embed_mentions(batch, normalize=normalize)  # noqa: E731
        self.vectors = encoder._encode(inputs, [len(s) for s, _ in inputs], fn, 64, "mention cache", False)
        self.index = faiss.IndexFlatIP(self.vectors.shape[1])
        self.index.add(self.vectors)

    def positive(self, i: int, table: torch.Tensor) -> torch.Tensor:
        """The vector of mention ``i``'s parent: its entity's (table) or a coreferent mention's (cache)."""
        e = int(self.entity[i])
        cluster = self.members[e]
        vecs = self.vectors[cluster]
        if len(cluster) > self.max_cluster:
            near = np.argsort(-(vecs @ self.vectors[i]), kind="stable")[: self.max_cluster]
            if not (cluster[near] == i).any():
                near[-1] = int(np.flatnonzero(cluster == i)[0])
            cluster, vecs = cluster[near], vecs[near]
        entity_vec = table[e].cpu().numpy()
        parents = arborescence_positives(vecs @ entity_vec, vecs @ vecs.T)
        parent = parents[int(np.flatnonzero(cluster == i)[0])]
        return table[e] if parent == ROOT else torch.from_numpy(self.vectors[cluster[parent]])

    def negatives(self, query: np.ndarray, idx: np.ndarray, n: int) -> Tuple[np.ndarray, np.ndarray]:
        """The ``n`` nearest training mentions of another gold entity, per batch mention."""
        _, found = self.index.search(np.ascontiguousarray(query, dtype=np.float32), min(len(self.entity), n * 4 + 32))
        rows = np.zeros((len(idx), n), dtype=np.int64)
        real = np.zeros((len(idx), n), dtype=bool)
        for b, i in enumerate(idx):
            ok = [j for j in found[b] if j >= 0 and self.entity[j] != self.entity[i]][:n]
            rows[b, : len(ok)], real[b, : len(ok)] = ok, True
        return rows, real


# ------------------------------------------------------------------------ checkpoints
def save_checkpoint(path: Path, encoder: BiEncoder, optimizer: torch.optim.Optimizer, state: dict) -> None:
    with atomic_dir(path) as tmp:
        encoder.save(tmp / "encoder")
        opt = optimizer.state_dict()
        tensors = {f"{i}.{k}": v.contiguous() for i, s in opt["state"].items() for k, v in s.items()}
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        (tmp / "state.json").write_text(json.dumps({**state, "param_groups": opt["param_groups"]}), encoding="utf8")


def load_checkpoint(path: Path, optimizer: torch.optim.Optimizer) -> dict:
    state = json.loads((path / "state.json").read_text(encoding="utf8"))
    tensors = load_file(str(path / "optimizer.safetensors"))
    per_param: Dict[int, dict] = {}
    for key, value in tensors.items():
        i, name = key.split(".", 1)
        per_param.setdefault(int(i), {})[name] = value
    optimizer.load_state_dict({"state": per_param, "param_groups": state.pop("param_groups")})
    return state


# ------------------------------------------------------------------------ the loop
class Trainer:
    def __init__(self, cfg: dict, output: Path):
        self.cfg, self.output = cfg, output
        t, p = cfg["training"], cfg["paths"]
        self.seed = int(t["seed"])
        torch.manual_seed(self.seed)
        last = output / "last"
        self.resuming = bool(t.get("resume", True)) and (last / "state.json").exists()
        source = str(last / "encoder") if self.resuming else cfg["encoder"]["base"]
        overrides = {k: v for k, v in cfg["encoder"].items() if k != "base"}
        name = cfg["loss"]["name"]
        if name not in LOSSES:
            raise ValueError(f"unknown loss {name!r}; choose one of {sorted(LOSSES)}")
        # settings of the other loss (e.g. alpha with "ce") are ignored, so one config serves both
        self.loss = make_loss(name, **{k: v for k, v in cfg["loss"].items() if k in LOSSES[name].defaults})
        self.train_entities = bool(t["train_entity_encoder"])
        if self.train_entities:
            overrides["similarity"] = self.loss.kind
        # with a frozen entity tower the KB's metric stays; a dot-product loss then scores raw
        # mention vectors against the KB's vectors (normalising a query never changes its ranking)
        self.normalize_mentions = self.loss.kind == "cosine"
        self.encoder = BiEncoder.from_pretrained(source, **overrides).to_device(t.get("device", "auto"))
        if not self.resuming:
            self.encoder.config.base = str(cfg["encoder"]["base"])
        self.index = EntityIndex.from_disk(p["kb"])
        if not self.train_entities:
            self.index.check_encoder(self.encoder)
            self.encoder.entity_model.requires_grad_(False)
        self.table = torch.from_numpy(self.index.embeddings.astype(np.float32)).to(self.encoder.device_)
        nlp = spacy.blank("en")
        self.stages: List[Tuple[str, Examples, int]] = []
        syn = cfg["synonyms"]
        if int(syn["steps"]) > 0:
            self.stages.append(("synonyms", synonym_examples(self.index, self.encoder, int(syn["pairs"]), self.seed), int(syn["steps"])))
        self.skipped: Dict[str, int] = {}
        if p.get("train"):
            examples, self.skipped = corpus_examples(read_docbin(nlp, p["train"]), self.index, self.encoder)
            per_epoch = math.ceil(len(examples) / int(t["batch_size"]))
            steps = int(t["max_steps"]) or int(float(t["epochs"]) * per_epoch)
            self.stages.append(("mentions", examples, steps))
        dev_docs = read_docbin(nlp, p["dev"]) if p.get("dev") else []
        limit = int(t.get("eval_docs", 0)) or len(dev_docs)
        self.dev, _ = corpus_examples(dev_docs[:limit], self.index, self.encoder)
        n = len(self.index)
        neg = cfg["negatives"]
        self.k = int(neg["count"])
        self.kind = neg["kind"]
        if self.kind not in NEGATIVE_KINDS:
            raise ValueError(f"negatives.kind must be one of {NEGATIVE_KINDS}, not {self.kind!r}")
        if self.kind == "kb" and self.train_entities:
            raise ValueError('negatives.kind = "kb" (softmax over the whole KB) needs a frozen entity tower')
        self.random = RandomNegatives(n, self.k, seed=self.seed)
        self.miner = HardNegativeMiner(self.k, hard_fraction=float(neg["hard_fraction"]), seed=self.seed, n_entities=n)
        if t.get("objective", "linking") == "arborescence":
            self.miner.refresh(self.index.embeddings.astype(np.float32))  # k/2 nearest wrong entities
        self.refresh_every = int(neg["refresh_every"])
        self.arborescence: Optional[ArborescenceTargets] = None
        if t.get("objective", "linking") == "arborescence":
            if self.train_entities or not self.stages or self.stages[-1][0] != "mentions":
                raise ValueError("the arborescence objective needs mention training with a frozen entity tower")
            arbo = cfg.get("arborescence", {})
            self.arborescence = ArborescenceTargets(
                self.stages[-1][1], int(arbo.get("refresh_every", 60)), int(arbo.get("max_cluster", 32))
            )
        elif t.get("objective", "linking") != "linking":
            raise ValueError(f"training.objective must be 'linking' or 'arborescence', not {t['objective']!r}")
        params = [p_ for p_ in self.encoder.parameters() if p_.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=float(t["lr"]), weight_decay=float(t.get("weight_decay", 0.01)))
        self.total = sum(s for _, _, s in self.stages)
        # the encoder is also saved as DIR/after_<stage> when a stage that is not the last one ends
        # (e.g. after synonym pre-alignment), so each stage can be evaluated on its own
        ends = np.cumsum([s for _, _, s in self.stages])
        self.stage_ends = {int(e): name for (name, _, _), e in zip(self.stages[:-1], ends[:-1])}
        precision = str(t.get("precision", "fp32"))
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"training.precision must be 'fp32' or 'bf16', not {precision!r}")
        self.bf16 = precision == "bf16"
        warm = max(1, int(float(t["warmup"]) * self.total))
        self.warm = warm
        self.state = {"step": 0, "best": -1.0, "best_step": 0, "history": [], "train_seconds": 0.0}
        if self.resuming:
            self.state.update(load_checkpoint(last, self.optimizer))

    # -------------------------------------------------------------- pieces
    def schedule(self, step: int) -> float:
        return linear_schedule(step, self.warm, self.total)

    def entity_vectors(self, rows: np.ndarray) -> torch.Tensor:
        """Vectors for KB rows: the stored table (frozen tower) or a fresh pass (trained tower)."""
        if not self.train_entities:
            return self.table[torch.from_numpy(rows.reshape(-1))].reshape(*rows.shape, -1)
        flat = rows.reshape(-1)
        uniq, inverse = np.unique(flat, return_inverse=True)
        seqs = self.encoder.entity_inputs([self.index.entities[i] for i in uniq])
        vecs = self.encoder.embed_entities(seqs)
        return vecs[torch.from_numpy(inverse)].reshape(*rows.shape, -1)

    def refresh_hard_index(self) -> None:
        if self.miner.hard_fraction <= 0:
            return
        if self.train_entities:
            pool = int(self.cfg["negatives"]["pool"]) or len(self.index)
            rows = np.arange(len(self.index)) if pool >= len(self.index) else np.sort(
                np.random.default_rng(self.seed + self.state["step"]).choice(len(self.index), pool, replace=False)
            )
            vectors = np.zeros((len(self.index), self.encoder.dim), np.float32)
            vectors[rows] = self.encoder.encode_entities([self.index.entities[i] for i in rows])
            self.miner.refresh(vectors)
        else:
            self.miner.refresh(self.index.embeddings.astype(np.float32))

    def negatives(self, m: torch.Tensor, gold: List[Set[int]], positives: List[int]) -> Tuple[np.ndarray, np.ndarray]:
        if self.kind == "in_batch":
            return in_batch(gold, positives)
        if self.miner.hard_fraction > 0:
            rows = self.miner.sample(m.detach().float().cpu().numpy(), gold)
        else:
            rows = self.random.sample(gold)
        return rows, np.ones(rows.shape, dtype=bool)

    def autocast(self):
        """bf16 autocast for the forward passes and losses (fast on GPUs; slow on CPUs without bf16 units)."""
        if self.bf16:
            return torch.autocast(self.encoder.device_.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step_loss(self, batch: Examples) -> torch.Tensor:
        m = self.encoder.embed_mentions(batch.inputs, normalize=self.normalize_mentions)
        positives = [min(g) for g in batch.gold]
        pos = self.entity_vectors(np.asarray(positives))
        if self.kind == "kb":
            neg_s, mask_t = whole_kb_scores(m, self.table, batch.gold, self.loss.kind)
            loss = self.loss.from_scores(self.loss.scores(m, pos), neg_s, mask_t)
            # FGSM perturbs the top-scoring wrong entities
            top = neg_s.detach().masked_fill(~mask_t, float("-inf")).topk(min(self.k, neg_s.shape[1]), dim=1).indices
            rows, mask_t = top.cpu().numpy(), torch.ones(top.shape, dtype=torch.bool, device=m.device)
        else:
            rows, mask = self.negatives(m, batch.gold, positives)
            neg = self.entity_vectors(rows)
            mask_t = torch.from_numpy(mask).to(m.device)
            loss = self.loss(m, pos, neg, mask_t)
        fgsm = self.cfg["fgsm"]
        if fgsm["enabled"]:
            n = int(fgsm["negatives"]) or rows.shape[1]
            ents = self.index.entities
            pos_seqs = self.encoder.entity_inputs([ents[r] for r in positives])
            neg_seqs_flat = self.encoder.entity_inputs([ents[r] for r in rows[:, :n].reshape(-1)])
            neg_seqs = [neg_seqs_flat[i * n : (i + 1) * n] for i in range(len(positives))]
            pos_adv, neg_adv = fgsm_entity_vectors(
                self.encoder, m, pos_seqs, neg_seqs, epsilon=float(fgsm["epsilon"]), kind=self.loss.kind
            )
            loss = loss + float(fgsm["weight"]) * self.loss(m, pos_adv, neg_adv, mask_t[:, :n])
        return loss

    def arborescence_loss(self, batch: Examples, idx: np.ndarray) -> torch.Tensor:
        """arboEL: the positive is the mention's parent in the minimum spanning arborescence of its
        gold entity's cluster; negatives are k/2 nearest wrong entities and k/2 nearest
        non-coreferent training mentions."""
        m = self.encoder.embed_mentions(batch.inputs, normalize=self.normalize_mentions)
        arbo = self.arborescence
        query = m.detach().float().cpu().numpy()
        half = max(1, self.k // 2)
        ent_rows, ent_real = self.miner.hard(query, batch.gold, half) if self.miner.index is not None else (
            self.random.sample(batch.gold)[:, :half], np.ones((len(idx), half), bool))
        men_rows, men_real = arbo.negatives(query, idx, self.k - half)
        pos = torch.stack([arbo.positive(int(i), self.table) for i in idx])
        cache = torch.from_numpy(arbo.vectors).to(m.device)
        neg = torch.cat([self.table[torch.from_numpy(np.maximum(ent_rows, 0))], cache[torch.from_numpy(men_rows)]], dim=1)
        mask = torch.from_numpy(np.concatenate([ent_real, men_real], axis=1)).to(m.device)
        return self.loss(m, pos.to(m.device), neg, mask)

    def dev_recall(self) -> float:
        """Recall@1 of the dev mentions against the KB (re-encoded first when the tower trains)."""
        if not len(self.dev):
            return float("nan")
        enc = self.encoder
        mentions = enc._encode(self.dev.inputs, [len(s) for s, _ in self.dev.inputs], enc.embed_mentions, 64, "dev", False)
        if self.train_entities:
            rows = sorted(set().union(*self.dev.gold))
            extra = np.random.default_rng(self.seed).choice(len(self.index), min(len(self.index), int(self.cfg["training"]["eval_kb_sample"])), replace=False)
            rows = np.array(sorted(set(rows) | set(extra.tolist())))
            index = EntityIndex([self.index.entities[i] for i in rows], enc.encode_entities([self.index.entities[i] for i in rows]), metric=enc.config.similarity, fingerprint="", kind="flat")
            _, top = index.search(mentions, 1)
            pred = rows[top[:, 0]]
        else:
            _, top = self.index.search(mentions, 1)
            pred = top[:, 0]
        return float(np.mean([p in g for p, g in zip(pred, self.dev.gold)]))

    # -------------------------------------------------------------- run
    def batches(self):
        """(stage, example indices, batch) from the current global step on, deterministic per seed."""
        bs = int(self.cfg["training"]["batch_size"])
        start = 0
        for name, examples, steps in self.stages:
            per_epoch = max(1, math.ceil(len(examples) / bs))
            for step in range(start, start + steps):
                if step < self.state["step"]:
                    continue
                local = step - start
                epoch, offset = divmod(local, per_epoch)
                order = np.random.default_rng(self.seed + 1000 * epoch + len(name)).permutation(len(examples))
                idx = order[offset * bs : (offset + 1) * bs]
                yield name, idx, Examples([examples.inputs[i] for i in idx], [examples.gold[i] for i in idx])
            start += steps

    def run(self, progress: bool = True) -> dict:
        t = self.cfg["training"]
        eval_every, clip = int(t["eval_every"]), float(t["grad_clip"])
        self.encoder.train()
        if not self.train_entities:
            self.encoder.entity_model.eval()
        self.refresh_hard_index()
        bar = tqdm(total=self.total, initial=self.state["step"], desc="training", disable=not progress)
        t0, losses = time.perf_counter(), []
        for stage, idx, batch in self.batches():
            step = self.state["step"]
            if self.train_entities and self.refresh_every and step and step % self.refresh_every == 0:
                self.refresh_hard_index()
            arbo = self.arborescence is not None and stage == "mentions"
            if arbo and (self.arborescence.vectors is None or step % self.arborescence.refresh_every == 0):
                self.arborescence.refresh(self.encoder, self.normalize_mentions)
            for group in self.optimizer.param_groups:
                group["lr"] = float(t["lr"]) * self.schedule(step)
            with self.autocast():
                loss = self.arborescence_loss(batch, idx) if arbo else self.step_loss(batch)
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in self.encoder.parameters() if p.requires_grad], clip)
            self.optimizer.step()
            losses.append(float(loss.detach()))
            self.state["step"] = step + 1
            bar.update(1)
            bar.set_postfix(stage=stage, loss=f"{np.mean(losses[-20:]):.3f}", dev=f"{self.state['best']:.3f}")
            if self.state["step"] in self.stage_ends:
                self.encoder.save(self.output / f"after_{self.stage_ends[self.state['step']]}")
            if self.state["step"] % eval_every == 0 or self.state["step"] == self.total:
                self.evaluate_and_save(np.mean(losses[-eval_every:]), time.perf_counter() - t0)
                t0 = time.perf_counter()
        bar.close()
        if not (self.output / "best").exists():  # no steps ran (e.g. steps = 0): the start is the best
            self.evaluate_and_save(float("nan"), 0.0)
        return self.state

    def evaluate_and_save(self, loss: float, seconds: float) -> None:
        self.state["train_seconds"] += seconds
        dev = self.dev_recall()
        self.encoder.train()
        if not self.train_entities:
            self.encoder.entity_model.eval()
        self.state["history"].append({"step": self.state["step"], "loss": round(float(loss), 4), "dev_r1": round(dev, 4)})
        if dev > self.state["best"] or not (self.output / "best").exists():
            self.state["best"], self.state["best_step"] = dev, self.state["step"]
            self.encoder.save(self.output / "best")
        save_checkpoint(self.output / "last", self.encoder, self.optimizer, self.state)
        (self.output / "train_log.json").write_text(
            json.dumps({**self.state, "skipped_train_mentions": self.skipped}, indent=2), encoding="utf8"
        )


def load_config(path: Path, overrides: Optional[dict] = None) -> Config:
    return Config().from_disk(path, overrides=overrides or {})


def run_config(trainer_cls, config: Path, output: Path, overrides: Optional[dict] = None, progress: bool = True) -> dict:
    """Load ``config`` with ``overrides``, save the resolved config as ``output/config.cfg`` and run
    ``trainer_cls(cfg, output)``; returns its final state."""
    cfg = load_config(config, overrides)
    output.mkdir(parents=True, exist_ok=True)
    Config(cfg).to_disk(output / "config.cfg")
    return trainer_cls(cfg, output).run(progress=progress)


def train(config: Path, output: Path, overrides: Optional[dict] = None, progress: bool = True) -> dict:
    """Train as ``config`` says; returns the final state (step, best dev recall@1, history)."""
    return run_config(Trainer, config, output, overrides, progress)
