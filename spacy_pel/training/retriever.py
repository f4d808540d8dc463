"""Retriever training (``python -m spacy_pel.train CONFIG --output DIR``).

Settings come from a spaCy-style config (``configs/train_pb_random.cfg``, read into
:class:`~spacy_pel.training.config.RetrieverConfig`). Each step: a batch of mentions → mention
vectors → negatives (random, in-batch, mixed-p hard, or the whole KB when the entity tower is
frozen) → proxy or cross-entropy loss (+ λ·FGSM term) → AdamW with linear warm-up/decay. Every
``eval_every`` steps it measures dev recall@1, keeps the best encoder in ``DIR/best`` and a
resumable checkpoint in ``DIR/last`` (:mod:`spacy_pel.training.loop`).

Two modes for the entity tower (``[training] train_entity_encoder``):

* ``false`` (CPU default): only the mention encoder learns; entity vectors are the KB's stored
  vectors, so the KB built with the base encoder stays valid (same fingerprint), hard negatives come
  from the full KB index at no cost, and no 354k-entity re-encoding is ever needed;
* ``true`` (the paper): both towers learn; negatives' vectors are re-encoded each step and the
  hard-negative index over ``negatives.pool`` entities is refreshed every ``refresh_every`` steps
  (``0``: never -- the KB's stored vectors, which must be the starting encoder's, are the index).
  ``negatives.kind = "shared"`` makes that affordable on a CPU: each row is encoded once a step and
  every mention of the batch is scored against all of them. The refreshed index is kept in ``DIR/last``
  (``hard_index.safetensors``), so a resumed run searches the one the interrupted run had.

KB synonym pre-alignment (``[synonyms] steps``) treats KB synonyms as mentions of their entity,
before the mention steps (or alone, with ``paths.train = null``); the encoder at the end of that
stage is also saved as ``DIR/after_synonyms``. ``[synonyms] replay`` mixes that share of the training
corpus's mentions into every synonym batch (the ``transfer`` workflow: a trained retriever learns a new
KB's synonyms without forgetting its mentions). ``[training] objective = "arborescence"`` trains the
mention steps with arboEL's arborescence positives (:mod:`spacy_pel.training.arborescence`).

``[training] entity_space = "centred"`` (frozen tower only) trains against ``normalize(e - μ)``, ``μ``
the KB's mean unit vector (:func:`~spacy_pel.models.linking.centre_vectors`): the KB table, the hard
negatives and the dev evaluation all use the centred vectors, and ``μ`` is saved with the encoder as
``entity_centre.npy``. At inference the KB must be searched in the same space:
:func:`centred_index` (``load_entity_centre(encoder_dir)``) gives that KB, in memory or, with
``to_disk``, as a KB folder that ``pel_linker`` reads unchanged.

``[training] mention_space = "batch_centred"`` (cosine losses) subtracts each batch's mean unit
mention vector before the loss, so the mentions cannot all move to one place together (with a
frozen, centred entity space the proxy loss's negative term is otherwise lowered by collapsing every
mention into the emptiest region of the KB). A running mean (``mention_centre.npy``, saved with the
encoder) replaces the batch mean at evaluation: ``normalize(normalize(m) - μ_m)``
(:func:`load_mention_centre`); the dev evaluation applies it, ``pel_linker`` does not yet.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import spacy
import torch
from safetensors.numpy import load_file, save_file

from ..corpora import read_docbin
from ..evaluation.evaluators import RecallEvaluator
from ..files import InputError
from ..kb import read_kb, require_trainable
from ..models.encoder import BiEncoder
from ..models.linking import LinkingLoss, centre_vectors, entity_centre
from ..models.negatives import HardNegativeMiner
from ..pipeline.updating import check_linkable, check_negatives, doc_gold_mentions, linkable_mentions
from ..retrieval.index import EntityIndex
from .arborescence import ArborescenceLoss, ArborescenceTargets
from .config import PathLike, RetrieverConfig
from .context_dropout import drop_context
from .entity_swaps import entity_swaps
from .fgsm import FGSM
from .loop import StepOutput, Task, TimeBudget, TrainingLoop, checkpoint_to_resume
from .name_pairs import NamePairLoss
from .run_config import config_for_run, run_lock
from .stages import Batch, Examples, Stage, replaying
from .synonyms import pair_inputs, sample_pairs, split_synonyms

CENTRE_FILE = "entity_centre.npy"
MENTION_CENTRE_FILE = "mention_centre.npy"
MENTION_MOMENTUM = 0.9  # running mean of the batch means: about the last 10 batches
HARD_INDEX_FILE = "hard_index.safetensors"  # in DIR/last: the refreshed hard-negative index (trained tower)


def centred_index(index: EntityIndex, centre: np.ndarray, chunk: int = 65536) -> EntityIndex:
    """The KB ``index`` with every vector replaced by ``normalize(e - centre)`` (same entities and
    fingerprint, exact search): the entity space of an encoder trained with ``entity_space = "centred"``."""
    vectors = np.concatenate([centre_vectors(index.embeddings[s : s + chunk], centre)
                              for s in range(0, len(index), chunk)]) if len(index) else index.embeddings
    return EntityIndex(index.entities, vectors, metric=index.metric, fingerprint=index.fingerprint,
                       encoder_source=index.encoder_source, kind="flat", entity_settings=index.entity_settings,
                       name_inputs=index.name_inputs)


def kb_records(path: PathLike, format: str) -> EntityIndex:
    """The entities of a KB file as an index without vectors (zeros, no fingerprint): the entity
    records a trained entity tower learns from before any KB is encoded."""
    entities = require_trainable(read_kb(path, format), path)
    return EntityIndex(entities, np.zeros((len(entities), 1), np.float16), metric="cosine", fingerprint="",
                       encoder_source="", kind="flat")


def load_entity_centre(encoder_dir: PathLike, name: str = CENTRE_FILE) -> Optional[np.ndarray]:
    """``μ`` saved with an encoder trained in the centred entity space, or None (raw space)."""
    path = Path(encoder_dir) / name
    return np.load(path, allow_pickle=False) if path.exists() else None


def load_mention_centre(encoder_dir: PathLike) -> Optional[np.ndarray]:
    """``μ_m`` of an encoder trained with ``mention_space = "batch_centred"``, or None."""
    return load_entity_centre(encoder_dir, MENTION_CENTRE_FILE)


class CentredRecallEvaluator(RecallEvaluator):
    """Dev recall@1 (frozen tower) with the mention vectors centred by the task's running mean."""

    def __init__(self, inputs, gold, index: EntityIndex, centre):
        super().__init__(inputs, gold, index)
        self.centre = centre  # () -> the current μ_m (numpy)

    def __call__(self, encoder: BiEncoder):
        if not len(self.gold):
            return {"dev_r1": float("nan")}
        lengths = [len(s) for s, _ in self.inputs]
        mentions = encoder._encode(self.inputs, lengths, encoder.embed_mentions, self.batch_size, "dev", False)
        pred = self.index.search(centre_vectors(mentions, self.centre()), 1)[1][:, 0]
        return {"dev_r1": float(np.mean([p in g for p, g in zip(pred, self.gold)]))}


def corpus_examples(docs, index: EntityIndex, encoder: BiEncoder, swaps: float = 0.0,
                    seed: int = 0, source: str = "") -> Tuple[Examples, Dict[str, int]]:
    """Gold mentions of ``docs`` whose ids are in the KB; NIL and absent ids are counted, not used
    (:func:`~spacy_pel.pipeline.updating.linkable_mentions`, which ``pel_linker.update`` uses too);
    with ``swaps``, that share of them again with another entity's name in their place
    (:mod:`.entity_swaps`). With ``source`` (the corpus's path), :func:`check_linkable`."""
    items = [g for doc in docs for g in doc_gold_mentions(doc)]
    items += entity_swaps(items, index, swaps, seed)
    mentions, gold, skipped = linkable_mentions(items, index.lookup)
    if source:
        check_linkable(source, len(mentions), skipped, len(index))
    return Examples(encoder.mention_inputs(mentions), gold), skipped


def synonym_examples(index: EntityIndex, encoder: BiEncoder, limit: int, seed: int,
                     held_out: int = 0) -> Tuple[Examples, Examples]:
    """KB synonyms as mentions of their own entity (:mod:`.synonyms`): at most ``limit`` training
    examples, and one held-out query for each of ``held_out`` entities none of whose synonyms is trained on."""
    train, queries = split_synonyms(index.entities, held_out, seed)
    names = index.entities.name_index()  # a synonym several entities share: each of them gold
    return (Examples(*pair_inputs(encoder, sample_pairs(train, limit, seed), names)),
            Examples(*pair_inputs(encoder, queries, names)))


class RetrieverTask(Task):
    """The bi-encoder retriever as a :class:`~spacy_pel.training.loop.Task`; ``checkpoint`` is the
    ``DIR/last`` folder to resume from (its encoder is loaded instead of ``encoder.base``)."""

    description = "training"

    def __init__(self, cfg: RetrieverConfig, checkpoint: Optional[Path] = None):
        self.cfg, t, p = cfg, cfg.training, cfg.paths
        self.seed, self.checkpoint = t.seed, checkpoint
        torch.manual_seed(self.seed)
        overrides = dict(cfg.encoder.overrides)
        self.loss = cfg.loss.build()
        self.train_entities = t.train_entity_encoder
        if self.train_entities:
            overrides["similarity"] = self.loss.kind
        # with a frozen entity tower the KB's metric stays; a dot-product loss then scores raw
        # mention vectors against the KB's vectors (normalising a query never changes its ranking)
        self.normalize_mentions = self.loss.kind == "cosine"
        self.index = kb_records(p.kb, p.kb_format) if p.kb_format else EntityIndex.from_disk(p.kb)
        nlp = spacy.blank("en")
        train_docs = read_docbin(nlp, p.train) if p.train else []
        if p.train:  # before the model loads: each mention needs an entity beyond its gold ones (its negatives)
            gold = linkable_mentions([g for doc in train_docs for g in doc_gold_mentions(doc)], self.index.lookup)[1]
            check_negatives(str(p.train), gold, len(self.index))
        source = str(checkpoint / "encoder") if checkpoint else cfg.encoder.base
        self.encoder = BiEncoder.from_pretrained(source, **overrides).to_device(t.device)
        if checkpoint is None:
            self.encoder.config.base = cfg.encoder.base
        self.device = self.encoder.device_
        if not self.train_entities:
            self.index.check_encoder(self.encoder)
            self.encoder.entity_model.requires_grad_(False)
        elif checkpoint is None and not cfg.negatives.refresh_every:
            self.index.check_encoder(self.encoder)  # its vectors are the hard-negative index: the start's own
        self.centre: Optional[np.ndarray] = None
        if t.entity_space == "centred":  # every later use of the KB's vectors sees the centred ones
            self.centre = entity_centre(self.index.embeddings)
            self.index = centred_index(self.index, self.centre)
        self.table = torch.from_numpy(self.index.embeddings.astype(np.float32)).to(self.device)
        self.stages: List[Stage] = []
        held = Examples([], [])
        if cfg.synonyms.steps > 0:
            # without a dev corpus, held-out entities' synonyms select the model (a KB and no annotated text)
            examples, held = synonym_examples(self.index, self.encoder, cfg.synonyms.pairs, self.seed,
                                              0 if p.dev else cfg.synonyms.eval_entities)
            if not len(examples):
                raise InputError(f"{p.kb}: no entity has a synonym to train on; self-alignment needs synonyms")
            self.stages.append(Stage("synonyms", examples, cfg.synonyms.steps))
        self.skipped: Dict[str, int] = {}
        if p.train:
            examples, self.skipped = corpus_examples(train_docs, self.index, self.encoder,
                                                     cfg.augment.entity_swaps, self.seed, source=str(p.train))
            if cfg.synonyms.replay:
                self.stages[0] = replaying(self.stages[0], examples, cfg.synonyms.replay, t.batch_size)
            steps = t.max_steps or int(t.epochs * math.ceil(len(examples) / t.batch_size))
            if steps:
                self.stages.append(Stage("mentions", examples, steps))
        dev_docs = read_docbin(nlp, p.dev) if p.dev else []
        dev = (corpus_examples(dev_docs[: t.eval_docs or len(dev_docs)], self.index, self.encoder, source=str(p.dev))[0]
               if p.dev else held)
        self.evaluator = RecallEvaluator(dev.inputs, dev.gold, self.index, reencode_entities=self.train_entities,
                                         kb_sample=t.eval_kb_sample, seed=self.seed)
        self.mention_centre: Optional[torch.Tensor] = None
        self.centre_mentions = t.mention_space == "batch_centred"
        if self.centre_mentions:
            saved = load_mention_centre(checkpoint / "encoder") if checkpoint else None
            self.mention_centre = None if saved is None else torch.from_numpy(saved).to(self.device)
            self.evaluator = CentredRecallEvaluator(dev.inputs, dev.gold, self.index, self.mention_centre_array)
        neg = cfg.negatives
        self.miner = HardNegativeMiner(neg.count, hard_fraction=neg.hard_fraction, seed=self.seed, n_entities=len(self.index))
        self.hard_pool: Optional[Tuple[np.ndarray, np.ndarray]] = None  # (KB rows, their vectors) of the last refresh
        fgsm = None
        if cfg.fgsm.enabled:
            f = cfg.fgsm
            transform = None if self.centre is None else self.centred_vectors
            fgsm = FGSM(self.loss, self.encoder, self.index.entities, f.epsilon, f.weight, f.negatives, transform,
                        f.mentions)
        entity_vectors = self.encoded_entity_vectors if self.train_entities else None
        self.linking = LinkingLoss(self.loss, neg.kind, self.miner, self.table, entity_vectors, fgsm)
        self.arborescence: Optional[ArborescenceLoss] = None
        self.name_pairs: Optional[NamePairLoss] = None
        if cfg.augment.name_pairs:  # the config checked that the entity tower learns
            self.name_pairs = NamePairLoss(self.encoder, self.index.entities, cfg.augment.name_pairs, self.seed)
        self.step_number = 0
        if t.objective == "arborescence":
            if self.train_entities or not self.stages or self.stages[-1].name != "mentions":
                raise ValueError("the arborescence objective needs mention training with a frozen entity tower")
            mentions, a = self.stages[-1].examples, cfg.arborescence
            targets = ArborescenceTargets(mentions.inputs, mentions.gold, a.refresh_every, a.max_cluster)
            self.arborescence = ArborescenceLoss(targets, self.loss, self.table, self.miner, neg.count)
        self.total_steps = sum(s.steps for s in self.stages)
        self.budget = TimeBudget(t.max_minutes, checkpoint)
        # the encoder is also saved as DIR/after_<stage> when a stage that is not the last one ends
        ends = np.cumsum([s.steps for s in self.stages])
        self.stage_ends = {int(e): s.name for s, e in zip(self.stages[:-1], ends[:-1])}

    # -------------------------------------------------------------- the Task interface
    @property
    def model(self) -> BiEncoder:
        return self.encoder

    def optimizer(self) -> torch.optim.Optimizer:
        t = self.cfg.training
        entity = {id(q) for q in self.encoder.entity_model.parameters()}
        groups = [{"params": [q for q in self.encoder.parameters() if q.requires_grad and id(q) not in entity], "lr": t.lr},
                  {"params": [q for q in self.encoder.entity_model.parameters() if q.requires_grad],
                   "lr": t.lr * t.entity_lr_scale}]
        return torch.optim.AdamW([g for g in groups if g["params"]], lr=t.lr, weight_decay=t.weight_decay)

    def train_mode(self) -> None:
        self.encoder.train()
        if not self.train_entities:
            self.encoder.entity_model.eval()

    def generators(self) -> Dict[str, np.random.Generator]:
        return {"negatives": self.miner.rng}

    def start(self, step: int) -> None:
        saved = self.checkpoint / HARD_INDEX_FILE if self.checkpoint is not None else None
        if saved is not None and saved.exists():  # the index of the last refresh, as the interrupted run had it
            arrays = load_file(str(saved))
            self.use_hard_index(arrays["rows"], arrays["vectors"])
        else:
            self.refresh_hard_index(step)

    def batches(self, start: int) -> Iterator[Batch]:
        """The batches from step ``start`` on, the same for a seed however often the run resumes."""
        bs = self.cfg.training.batch_size
        first = 0
        self.budget.start()  # the budget counts training steps, not loading
        for stage in self.stages:
            for step in range(max(start, first), first + stage.steps):
                if self.budget.spent():
                    return
                idx = stage.batch(step - first, bs, self.seed)
                examples = stage.examples.subset(idx)
                if stage.name == "mentions":
                    tok = self.encoder.tokenizer
                    examples = drop_context(examples, self.cfg.augment.context_dropout, self.seed, step,
                                            tok.cls_token_id, tok.sep_token_id)
                yield Batch(stage.name, idx, examples)
            first += stage.steps

    def before_step(self, step: int, batch: Batch) -> None:
        self.step_number = step
        every = self.cfg.negatives.refresh_every
        if self.train_entities and every and step and step % every == 0:
            self.refresh_hard_index(step)
        arbo = self.arborescence
        if arbo is not None and batch.stage == "mentions" and arbo.targets.due(step):
            arbo.targets.refresh(self.encoder, self.normalize_mentions)

    def step(self, batch: Batch) -> StepOutput:
        m = self.encoder.embed_mentions(batch.examples.inputs, normalize=self.normalize_mentions)
        if self.centre_mentions:
            m = self.batch_centred(m)
        if self.arborescence is not None and batch.stage == "mentions":
            loss = self.arborescence(m, batch.examples.gold, batch.idx)
        else:
            loss = self.linking(m, batch.examples.gold)
        if self.name_pairs is not None and batch.stage == "mentions":
            loss = loss + self.name_pairs(batch.examples, self.step_number)
        return StepOutput(loss, {"loss": float(loss.detach())})

    def save(self, folder: Path) -> None:
        self.encoder.save(folder)
        if self.centre is not None:
            np.save(Path(folder) / CENTRE_FILE, self.centre, allow_pickle=False)
        if self.mention_centre is not None:
            np.save(Path(folder) / MENTION_CENTRE_FILE, self.mention_centre_array(), allow_pickle=False)

    def save_checkpoint(self, folder: Path) -> None:
        self.save(folder / "encoder")
        if self.hard_pool is not None:
            save_file(dict(zip(("rows", "vectors"), self.hard_pool)), str(Path(folder) / HARD_INDEX_FILE))

    def snapshot(self, done: int) -> Optional[str]:
        return f"after_{self.stage_ends[done]}" if done in self.stage_ends else None

    def log_extra(self) -> Dict[str, Any]:
        return {"skipped_train_mentions": self.skipped}

    # -------------------------------------------------------------- pieces
    def batch_centred(self, m: torch.Tensor) -> torch.Tensor:
        """Unit mention vectors minus their batch mean; the running mean ``μ_m`` follows the batch means."""
        u = torch.nn.functional.normalize(m, dim=-1)
        mean = u.mean(0)
        with torch.no_grad():
            if self.mention_centre is None:
                self.mention_centre = mean.detach().float().clone()
            else:
                self.mention_centre.mul_(MENTION_MOMENTUM).add_((1 - MENTION_MOMENTUM) * mean.detach().float())
        return u - mean

    def mention_centre_array(self) -> np.ndarray:
        if self.mention_centre is None:
            return np.zeros(self.encoder.dim, np.float32)
        return self.mention_centre.cpu().numpy()

    def centred_vectors(self, vectors: torch.Tensor) -> torch.Tensor:
        return centre_vectors(vectors, torch.from_numpy(self.centre).to(vectors.device))

    def encoded_entity_vectors(self, rows: np.ndarray) -> torch.Tensor:
        """Vectors for KB rows from a fresh pass of the (trained) entity tower, each row once."""
        if rows.size == 0:
            return self.table.new_zeros(*rows.shape, self.encoder.dim)
        uniq, inverse = np.unique(rows.reshape(-1), return_inverse=True)
        vecs = self.encoder.embed_entities(self.encoder.entity_inputs([self.index.entities[i] for i in uniq]))
        return vecs[torch.from_numpy(inverse)].reshape(*rows.shape, -1)

    def refresh_hard_index(self, step: int) -> None:
        """Rebuild the hard-negative index: the KB's vectors, or (trained tower) a fresh encoding
        of ``negatives.pool`` random KB entities (the others are zero vectors, never found)."""
        if self.miner.hard_fraction <= 0:
            return
        if not self.train_entities or not self.cfg.negatives.refresh_every:
            # frozen tower: the KB's own vectors; trained tower without refreshes: the KB as the starting
            # encoder wrote it (a stale index, as BLINK's and arboEL's between refreshes), never re-encoded
            self.miner.refresh(self.index.embeddings.astype(np.float32))
            return
        n = len(self.index)
        pool = self.cfg.negatives.pool or n
        rng = np.random.default_rng(self.seed + step)
        rows = np.arange(n) if pool >= n else np.sort(rng.choice(n, pool, replace=False))
        self.use_hard_index(rows, self.encoder.encode_entities([self.index.entities[i] for i in rows]))

    def use_hard_index(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        """Search hard negatives among the ``vectors`` of KB ``rows`` (the other rows zero vectors)."""
        self.hard_pool = (np.asarray(rows, np.int64), np.ascontiguousarray(vectors, np.float32))
        table = np.zeros((len(self.index), self.encoder.dim), np.float32)
        table[self.hard_pool[0]] = self.hard_pool[1]
        self.miner.refresh(table)


def run_retriever(cfg: RetrieverConfig, output: Path, progress: bool = True) -> Dict[str, Any]:
    """Train the retriever ``cfg`` describes into ``output``; returns the loop's final state."""
    checkpoint = checkpoint_to_resume(output, cfg.training.resume)
    return TrainingLoop(RetrieverTask(cfg, checkpoint), cfg.training, output, checkpoint).run(progress)


def train(config: PathLike, output: PathLike, overrides: Optional[dict] = None, progress: bool = True) -> Dict[str, Any]:
    """Train as the config file ``config`` (with ``overrides``) says; the resolved config is saved as
    ``output/config.cfg``. Returns the final state (step, best dev recall@1, history). The output's lock is
    held throughout (:func:`~.run_config.run_lock`)."""
    with run_lock(output):
        cfg, output = config_for_run(RetrieverConfig, config, output, overrides)
        return run_retriever(cfg, output, progress)
