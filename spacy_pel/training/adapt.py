"""KB self-alignment (``python -m spacy_pel adapt KB -o ENCODER``): teach the encoder the KB's own
names, as SapBERT does, before (or instead of) any annotated text.

An entity's names and synonyms are positives of each other; every other name in the batch is a
negative, unless it is also a name of the entity (a synonym several entities share: masked, neither, as
a composite mention's partners are never negatives). A batch draws ``batch_pairs`` entities (by their
number of names, or all alike), two of each one's names, then adds ``negatives.per_batch`` hard names:
for each anchor, the nearest names of other entities in a pool of KB names encoded by the encoder as it
was at the last refresh (every ``negatives.refresh_every`` steps). The pair loss (multi-similarity or
InfoNCE, :mod:`spacy_pel.models.pair_losses`) runs over the batch's cosine matrix.

One transformer learns -- the entity tower, on ``[CLS] name [SEP]`` inputs like the name rows'. The
encoder written at the end has it as **both** towers (the mention tower keeps its marker rows), so it
is a starting point for mention training (``train``, both towers learning) and a retriever on its own.

Held out: ``eval_entities`` entities with two or more names; the evaluation scores how often one of
their synonyms finds its entity's name first among those names and ``eval_pool`` names of the other
entities (none of the held-out entities' other names, so never the query itself) (``synonym_r1``); the
best model so far is the one written. The loop (:mod:`.loop`) resumes from ``ENCODER.work/last`` (with
the hard-name pool of the last refresh, ``name_pool.safetensors``); a work folder made from another KB
file, config or start encoder (a folder's files, or a model name: :func:`start_encoder_identity`) is
discarded.

``ENCODER`` is replaced at the end, so it must be new, an empty folder or an encoder folder (one with
``pel_encoder.json``: an earlier run's output, or a trained encoder); anything else is refused before
any work (:func:`check_output`), as is an ``ENCODER.work`` that is not a work folder of adapt's.
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from ..evaluation.evaluators import Evaluator
from ..files import InputError, atomic_dir, atomic_write, check_output_folder, file_digest, folder_digest, json_text
from ..kb import Entity, kb_files, normalize, read_kb, require_trainable
from ..models.encoder import CONFIG_FILE, BiEncoder
from ..retrieval.names import encode_names, entity_names, name_inputs
from .adapt_config import AdaptConfig
from .config import PathLike
from .loop import StepOutput, Task, TimeBudget, TrainingLoop, checkpoint_to_resume
from .run_config import load_config, run_lock, set_aside_unreadable, stamp_changes

log = logging.getLogger(__name__)
WORK_SUFFIX = ".work"
STAMP_FILE = "inputs.json"
LOG_FILE = "adapt_log.json"
POOL_FILE = "name_pool.safetensors"  # in the checkpoint: the hard-name pool of the last refresh
UNSTAMPED = ("max_minutes", "resume", "device", "eval_every")  # settings that do not change what a resumed run computes


# ------------------------------------------------------------------ the KB's names
class KBNames:
    """Every entity's distinct names (:func:`~spacy_pel.retrieval.names.entity_names`), flattened:
    ``names[i]`` belongs to entity ``label[i]``; ``first[e]`` is entity ``e``'s first name's slot;
    ``shared[i]``, for a name several entities have (the same after :func:`~spacy_pel.kb.normalize`), is
    every entity it names."""

    def __init__(self, entities: List[Entity]):
        per = [entity_names(e) for e in entities]
        self.counts = np.array([len(n) for n in per], np.int64)
        self.first = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)
        self.names = [n for names in per for n in names]
        self.label = np.repeat(np.arange(len(per)), self.counts)
        keys = [normalize(n) for n in self.names]
        named: Dict[str, set] = defaultdict(set)
        for key, label in zip(keys, self.label.tolist()):
            named[key].add(label)
        shared = {key: np.array(sorted(e), np.int64) for key, e in named.items() if len(e) > 1}
        self.shared: Dict[int, np.ndarray] = {i: shared[k] for i, k in enumerate(keys) if k in shared}

    def __len__(self) -> int:
        return len(self.names)

    def multi(self) -> np.ndarray:
        """Entities with at least two names (those that give a positive pair)."""
        return np.flatnonzero(self.counts >= 2)

    def named(self, slot: int) -> np.ndarray:
        """The entities that name ``slot`` is a name of: its own, and those of a name several share."""
        return self.shared.get(int(slot), self.label[slot : slot + 1])

    def related(self, a: int, b: int) -> bool:
        """Whether slot ``a``'s name is a name of ``b``'s entity or the other way round: no negatives of each other."""
        a, b = int(a), int(b)
        if a in self.shared or b in self.shared:
            return bool(np.isin(self.label[a], self.named(b)) or np.isin(self.label[b], self.named(a)))
        return bool(self.label[a] == self.label[b])

    def masked_pairs(self, slots: np.ndarray) -> Optional[np.ndarray]:
        """``[n, n]``: the pairs of ``slots`` of two entities that are :meth:`related` (masked, as a composite
        gold's partners are), or None when there is none."""
        labels = self.label[slots]
        out = np.zeros((len(slots), len(slots)), bool)
        for j, slot in enumerate(slots):
            if int(slot) in self.shared:
                out[:, j] = np.isin(labels, self.shared[int(slot)])
        out = (out | out.T) & (labels[:, None] != labels[None, :])
        return out if out.any() else None


def split_entities(names: KBNames, eval_entities: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """Entities with two or more names, split into those trained on and ``eval_entities`` held out
    (at most a tenth of them), the same for a seed."""
    multi = names.multi()
    held = np.random.default_rng(seed).choice(multi, min(eval_entities, len(multi) // 10 or 1), replace=False)
    return np.setdiff1d(multi, held), held


class SynonymEvaluator(Evaluator):
    """Held-out synonym retrieval: a synonym of each held-out entity against their first names and
    ``pool`` names of the other entities (the entity tower, ``[CLS] name [SEP]``)."""

    primary_metric = "synonym_r1"

    def __init__(self, names: KBNames, held_out: np.ndarray, pool: int, max_length: int, seed: int):
        rng = np.random.default_rng(seed + 7)
        self.max_length = max_length
        self.queries = [names.names[names.first[e] + 1 + rng.integers(names.counts[e] - 1)] for e in held_out]
        self.query_labels = held_out
        others = np.flatnonzero(~np.isin(names.label, held_out))  # no held-out entity's name: the query is none
        extra = rng.choice(others, min(pool, len(others)), replace=False) if len(others) else others
        slots = np.concatenate([names.first[held_out], extra]).astype(np.int64)
        self.targets = [names.names[i] for i in slots]
        self.target_labels = names.label[slots]

    def __call__(self, encoder: BiEncoder) -> Dict[str, Any]:
        q = torch.from_numpy(encode_names(encoder, self.queries, self.max_length))
        t = torch.from_numpy(encode_names(encoder, self.targets, self.max_length))
        best = (q @ t.T).argmax(1).numpy()
        return {"synonym_r1": float(np.mean(self.target_labels[best] == self.query_labels))}


# ------------------------------------------------------------------ the task
class AdaptTask(Task):
    """KB self-alignment as a :class:`~spacy_pel.training.loop.Task` (module doc)."""

    description = "adapting"
    loss_parts = ("loss", "names_per_s")

    def __init__(self, cfg: AdaptConfig, entities: List[Entity], checkpoint: Optional[Path] = None):
        self.cfg, t, self.checkpoint = cfg, cfg.training, checkpoint
        torch.manual_seed(t.seed)
        source = str(checkpoint / "encoder") if checkpoint else cfg.encoder.base
        self.encoder = BiEncoder.from_pretrained(source).to_device(t.device)
        if checkpoint is None:
            self.encoder.config.base = cfg.encoder.base
        self.encoder.mention_model.requires_grad_(False)
        self.device = self.encoder.device_
        self.loss = cfg.loss.build()
        self.names = KBNames(entities)
        multi = self.names.multi()
        if len(multi) < 2:
            raise InputError(f"{cfg.kb.path}: {len(multi)} entities have two or more names; self-alignment needs synonyms")
        self.train_entities, held = split_entities(self.names, t.eval_entities, t.seed)
        weights = self.names.counts[self.train_entities].astype(np.float64) if t.entity_weight == "names" else None
        self.p = None if weights is None else weights / weights.sum()
        self.evaluator = SynonymEvaluator(self.names, np.sort(held), t.eval_pool, cfg.encoder.max_length, t.seed)
        self.total_steps = t.max_steps
        self.budget = TimeBudget(t.max_minutes, checkpoint)
        self.pool: Optional[Tuple[torch.Tensor, np.ndarray]] = None  # (pool vectors, pool name slots)
        self.last_step = time.perf_counter()

    @property
    def model(self) -> BiEncoder:
        return self.encoder

    def optimizer(self) -> torch.optim.Optimizer:
        t = self.cfg.training
        return torch.optim.AdamW(self.encoder.entity_model.parameters(), lr=t.lr, weight_decay=t.weight_decay)

    def train_mode(self) -> None:
        self.encoder.entity_model.train()
        self.encoder.mention_model.eval()

    def batches(self, start: int) -> Iterator[np.ndarray]:
        """Per step: ``[batch_pairs, 2]`` name slots (two names of one entity a row), the same for a
        seed however often the run resumes; stops early when the time budget is spent."""
        t = self.cfg.training
        n = min(t.batch_pairs, len(self.train_entities))
        self.budget.start()  # the budget counts training steps, not loading and the first pool
        for step in range(start, self.total_steps):
            if self.budget.spent():
                log.info("adapt: time budget of %.1f min spent at step %d", t.max_minutes, step)
                return
            rng = np.random.default_rng([t.seed, step])
            ents = rng.choice(self.train_entities, n, replace=False, p=self.p)
            counts = self.names.counts[ents]
            a = rng.integers(counts)
            b = (a + 1 + rng.integers(counts - 1)) % counts  # another name of the same entity
            first = self.names.first[ents]
            yield np.stack([first + a, first + b], 1)

    def start(self, step: int) -> None:
        saved = self.checkpoint / POOL_FILE if self.checkpoint is not None else None
        if saved is not None and saved.exists():  # the pool of the last refresh, as the interrupted run had it
            arrays = load_file(str(saved))
            self.pool = (torch.from_numpy(arrays["vectors"]).to(self.device), arrays["slots"])
        else:
            self.refresh_pool(step)

    def before_step(self, step: int, batch) -> None:
        every = self.cfg.negatives.refresh_every
        if every and step and step % every == 0:
            self.refresh_pool(step)

    def refresh_pool(self, step: int) -> None:
        neg = self.cfg.negatives
        if not neg.per_batch:
            return
        n = len(self.names)
        rng = np.random.default_rng([self.cfg.training.seed, step, 1])
        slots = np.arange(n) if not neg.pool or neg.pool >= n else np.sort(rng.choice(n, neg.pool, replace=False))
        vectors = encode_names(self.encoder, [self.names.names[i] for i in slots], self.cfg.encoder.max_length)
        self.pool = (torch.from_numpy(vectors).to(self.device), slots)

    def hard_slots(self, anchors: torch.Tensor, anchor_slots: np.ndarray) -> np.ndarray:
        """Up to ``per_batch`` pool names nearest the anchors that are no names of theirs (:meth:`KBNames.related`)."""
        want = self.cfg.negatives.per_batch
        if not want or self.pool is None:
            return np.zeros(0, np.int64)
        vectors, slots = self.pool
        per = -(-want // len(anchor_slots))  # per anchor, rounded up
        k = min(len(slots), 2 * per + 4)
        with torch.no_grad():
            top = (anchors.detach().float() @ vectors.T).topk(k, dim=1).indices.cpu().numpy()
        chosen: List[int] = []
        seen = set()
        for row, anchor in zip(top, anchor_slots):
            found = [int(slots[j]) for j in row if not self.names.related(anchor, slots[j])][:per]
            for s in found:
                if s not in seen:
                    seen.add(s)
                    chosen.append(s)
        return np.array(chosen[:want], np.int64)

    def embed(self, slots: np.ndarray) -> torch.Tensor:
        names = [self.names.names[i] for i in slots]
        seqs = name_inputs(self.encoder, names, [""] * len(names), "name", self.cfg.encoder.max_length)
        return self.encoder.embed_entities(seqs)

    def step(self, batch: np.ndarray) -> StepOutput:
        slots = batch.reshape(-1)
        x = self.embed(slots)
        hard = self.hard_slots(x[0::2], slots[0::2])
        if len(hard):
            x = torch.cat([x, self.embed(hard)])
            slots = np.concatenate([slots, hard])
        labels = self.names.label[slots]
        masked = self.names.masked_pairs(slots)
        loss = self.loss(x, torch.from_numpy(labels).to(x.device),
                         ignore=None if masked is None else torch.from_numpy(masked).to(x.device))
        now = time.perf_counter()
        rate, self.last_step = len(labels) / max(now - self.last_step, 1e-9), now
        return StepOutput(loss, {"loss": float(loss.detach()), "names_per_s": rate})

    def save(self, folder: Path) -> None:
        shared_tower_encoder(self.encoder).save(folder)

    def save_checkpoint(self, folder: Path) -> None:
        self.save(folder / "encoder")
        if self.pool is not None:
            vectors, slots = self.pool
            save_file({"vectors": vectors.cpu().numpy(), "slots": np.asarray(slots, np.int64)}, str(folder / POOL_FILE))


def shared_tower_encoder(encoder: BiEncoder) -> BiEncoder:
    """``encoder`` with its mention tower set to the entity tower's weights (the mention tower's
    extra marker rows of the word-piece embeddings are kept): one adapted transformer as both towers."""
    source = encoder.entity_model.state_dict()
    target = encoder.mention_model.state_dict()
    with torch.no_grad():
        for key, value in source.items():
            if target[key].shape == value.shape:
                target[key].copy_(value)
            else:  # the word-piece embeddings: the mention tower has the [M_s]/[M_e] rows too
                target[key][: value.shape[0]].copy_(value)
    return encoder


# ------------------------------------------------------------------ running it
def check_output(output: Path) -> None:
    """Refuse an ``output`` that writing the encoder would destroy: a file, or a folder with files in it
    that is not an encoder folder (no ``pel_encoder.json``), and an ``output.work`` that is not adapt's."""
    output, work = Path(output), work_folder(Path(output))
    check_output_folder(output, "encoder folder", lambda folder: (folder / CONFIG_FILE).is_file())
    if work.exists() and not (work.is_dir() and (not any(work.iterdir()) or (work / STAMP_FILE).is_file())):
        raise InputError(f"{work} (where adapt keeps the resumable state of -o {output}) exists and is not a work "
                         f"folder of adapt's (no {STAMP_FILE}): adapt would delete it; move it or give another -o")


def work_folder(output: Path) -> Path:
    """The resumable state of a run writing ``output``."""
    return output.with_name(output.name + WORK_SUFFIX)


def start_encoder_identity(base: str, output: Path) -> Dict[str, str]:
    """What the run starts from: for a local folder, the SHA-256 of its files (their relative paths and
    contents; any of ``output`` and its work folder below it left out), so a folder replaced under the same
    name counts as another encoder; otherwise the model name."""
    root = Path(str(base))
    if not root.is_dir():
        return {"name": str(base)}
    root = root.resolve()
    skip = [p for p in (Path(output).resolve(), work_folder(Path(output).resolve())) if p != root]
    return {"folder_sha256": folder_digest(root, skip)}


def inputs_stamp(cfg: AdaptConfig, output: Path) -> Dict[str, Any]:
    """What a work folder was made from: the settings, the KB files' content hash and the start encoder (the KB's
    and the encoder's paths are no settings: their contents count, so they may be spelled otherwise)."""
    settings = asdict(cfg)
    for section, key in (("kb", "path"), ("encoder", "base"), *(("training", key) for key in UNSTAMPED)):
        settings[section].pop(key, None)
    return {**kb_stamp(cfg.kb.path, cfg.kb.format, settings),
            "start_encoder": start_encoder_identity(cfg.encoder.base, output)}


def kb_stamp(kb: PathLike, format: str, settings: Dict[str, Any]) -> Dict[str, Any]:
    """``settings`` and the content hash of the KB files ``kb`` (in ``format``) they train on."""
    return {"kb_sha256": file_digest(*kb_files(kb, format)), "settings": settings}


STAMPED = {"kb_sha256": "another KB file", "settings": "other settings", "train_sha256": "another training corpus",
           "dev_sha256": "another dev corpus", "start_encoder": "another start encoder"}


def prepare_work(work: Path, stamp: Dict[str, Any], resume: bool) -> None:
    """Keep ``work`` only when it was made from the same inputs (and resuming is asked for); say which
    input changed when it is discarded (a stamp that cannot be read: the folder is set aside, said so)."""
    path = work / STAMP_FILE
    if work.exists() and not set_aside_unreadable(work, [path]):
        old = json.loads(path.read_text(encoding="utf8")) if path.is_file() else {}
        changed = stamp_changes(old, stamp, STAMPED)
        if changed or not resume:
            why = ("not stamped with its inputs" if not old else f"made from {', '.join(changed)}" if changed
                   else "there and resume is off")
            log.warning("adapt: %s was %s: starting over", work, why)
            shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(stamp, indent=2), encoding="utf8"))


def run_adapt(cfg: AdaptConfig, output: PathLike, entities: Optional[List[Entity]] = None,
              progress: bool = True) -> Dict[str, Any]:
    """Self-align ``cfg.encoder.base`` on the KB's names; write the encoder to ``output`` (its work
    folder, ``output.work``, keeps the resumable state). Returns the loop's final state."""
    output = Path(output)
    check_output(output)
    work = work_folder(output)
    prepare_work(work, inputs_stamp(cfg, output), cfg.training.resume)
    if entities is None:
        entities = require_trainable(read_kb(cfg.kb.path, cfg.kb.format), cfg.kb.path)
    checkpoint = checkpoint_to_resume(work, cfg.training.resume)
    task = AdaptTask(cfg, entities, checkpoint)
    state = TrainingLoop(task, cfg.training, work, checkpoint).run(progress)
    state["names"], state["entities"] = len(task.names), len(entities)
    state["train_pairs_entities"] = int(len(task.train_entities))
    publish(work, output, state)
    return state


def publish(work: Path, output: Path, state: Dict[str, Any]) -> None:
    """Write the work folder's best encoder to ``output`` atomically, with the run's log (with no dev
    metric -- nothing held out -- that is the last step's model: ``state["selected"]``)."""
    if state.get("selected"):
        log.info("adapt: no held-out synonym to choose a model by (fewer than 10 entities with synonyms, or "
                 "eval_entities 0): writing the model of the last step, %d", state["best_step"])
    with atomic_dir(output) as tmp:
        for item in (work / "best").iterdir():
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, tmp / item.name)
        (tmp / LOG_FILE).write_text(json_text(state, indent=2), encoding="utf8")


def nested(overrides: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """``{"kb.path": x}`` → ``{"kb": {"path": x}}``."""
    out: Dict[str, Dict[str, Any]] = {}
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        out.setdefault(section, {})[name] = value
    return out


def adapt(config: Optional[PathLike], output: PathLike, overrides: Optional[dict] = None,
          progress: bool = True) -> Dict[str, Any]:
    """Self-align as the config file ``config`` (``None``: the defaults of
    :class:`~.adapt_config.AdaptConfig`) with ``overrides`` (``{"kb.path": …}``) says."""
    with run_lock(output):  # the output's lock, held throughout
        raw = load_config(config, overrides) if config is not None else nested(dict(overrides or {}))
        cfg = AdaptConfig.from_config(raw, str(config or "adapt settings"))
        return run_adapt(cfg, output, progress=progress)
