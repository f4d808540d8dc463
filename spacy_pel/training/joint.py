"""Joint end-to-end training (SPEC §2): ``python -m spacy_pel.train_e2e CONFIG --output DIR``.

One pass of the mention transformer per document (:func:`spacy_pel.models.doc_encoder.encode_docs`,
with the graph kept) feeds two losses that train it together with the span scorer:

* span detection, weighted by ``spans.weight``: binary cross-entropy over every enumerated span of
  ≤ ``spans.max_len`` tokens (gold spans positive, all others negative), or with ``spans.kind =
  "bio"`` cross-entropy of every token's O/B/I tag;
* span labels (``spans.labels``): cross-entropy of the scorer's label head over the gold spans'
  corpus labels, weighted by ``spans.label_weight`` — how found spans get labels such as Chemical;
* linking: each gold span's mean-pooled vector (what ``pel_linker`` uses with ``spacy_pel.vectors.collective.v1`` /
  ``spacy_pel.mentions.span_finder.v1``) against the KB's stored entity vectors, with the retriever's losses and negatives
  (:class:`~spacy_pel.models.linking.LinkingLoss`: ``sampled`` random/mixed-p hard, or ``kb`` =
  softmax over the whole KB), weighted by ``training.link_weight`` (0: spans only, for a span
  finder whose spans a separate retriever links).

The entity tower stays frozen, as in the retriever's CPU default, so the KB built with the base
encoder stays valid. The loop (:mod:`spacy_pel.training.loop`) evaluates the strict end-to-end F1
(span + id) on ``eval_docs`` dev documents every ``eval_every`` steps and keeps the best model
(``DIR/best``: encoder folder with ``span_scorer.safetensors``); ``DIR/last`` is a resumable
checkpoint. Each time a model is kept, the span threshold γ with the best span F1 on those dev documents
(from the evaluation that chose it) and the label → KB-type map learned from the training corpus go with it,
in ``DIR/best/span_report.json``: ``DIR/best`` is replaced as one folder, so after an interruption it is
still a whole span model, report included.

With ``seeds`` N > 1 (:func:`train_e2e_seeds`), N span models are trained one after the other,
``training.seed`` + k for the k-th (k ≥ 1) into ``DIR/seeds/<k>``, each resumable on its own; the
output's ``span_models.json`` lists their ``best`` folders, so ``model = "DIR"`` in the span finder
averages them all (:mod:`spacy_pel.pipeline.span_ensemble`).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np
import spacy
import torch
import torch.nn.functional as F

from ..corpora import read_docbin, require_gold_spans
from ..evaluation.evaluators import DocExample, EndToEndModel, JointEvaluator, Metrics
from ..files import atomic_write, json_text
from ..models.doc_encoder import encode_docs, span_means
from ..models.encoder import BiEncoder
from ..models.linking import LinkingLoss
from ..models.negatives import HardNegativeMiner
from ..models.span_scorer import SCORER_FILE, SpanScorer, bio_targets, load_span_scorer, save_span_scorer
from ..pipeline.mentions import REPORT_FILE, learn_labels
from ..pipeline.span_ensemble import MODELS_FILE, write_models_file
from ..pipeline.updating import check_linkable, doc_gold_mentions, linkable_mentions
from ..retrieval.index import EntityIndex
from .config import JointConfig, PathLike
from .loop import StepOutput, Task, TrainingLoop, checkpoint_to_resume
from .run_config import config_for_run, load_config, run_lock

__all__ = ["DocExample", "JointTask", "SCORER_FILE", "train_e2e", "train_e2e_seeds"]
SEEDS_DIR = "seeds"  # train_e2e_seeds: the further span models' folders, inside the output


def require_linkable(source: PathLike, docs: Sequence, index: EntityIndex) -> None:
    """Refuse a corpus none of whose gold mentions has an id in the KB, as the retriever does
    (:func:`~spacy_pel.pipeline.updating.check_linkable`)."""
    found, _, skipped = linkable_mentions((g for doc in docs for g in doc_gold_mentions(doc)), index.lookup)
    check_linkable(str(source), len(found), skipped, len(index))


class SelectingEvaluator(JointEvaluator):
    """The joint evaluator keeping the predictions of the model it scored last: the model saved as ``DIR/best``
    right after gets its γ from them, with no second pass over the dev documents."""

    last: Optional[List[dict]] = None

    def predictions(self, model: EndToEndModel) -> List[dict]:
        self.last = super().predictions(model)
        return self.last

    def choose_last(self) -> Metrics:
        """:meth:`choose_threshold` for the model scored last."""
        return max((self.scores(self.last, t) for t in self.thresholds), key=lambda r: r["span"]["f"])


class JointTask(Task):
    """The joint end-to-end model as a :class:`~spacy_pel.training.loop.Task`; ``checkpoint`` is
    the ``DIR/last`` folder to resume from (encoder and span scorer are loaded from it)."""

    description = "e2e training"
    loss_parts = ("link_loss", "span_loss", "label_loss")

    def __init__(self, cfg: JointConfig, checkpoint: Optional[Path] = None):
        self.cfg, t, p = cfg, cfg.training, cfg.paths
        self.seed = t.seed
        torch.manual_seed(self.seed)
        source = str(checkpoint / "encoder") if checkpoint else cfg.encoder.base
        self.encoder = BiEncoder.from_pretrained(source, **cfg.encoder.overrides).to_device(t.device)
        self.device = self.encoder.device_
        self.index = EntityIndex.from_disk(p.kb)
        self.index.check_encoder(self.encoder)
        self.encoder.entity_model.requires_grad_(False)
        self.loss = cfg.loss.build()
        table = torch.from_numpy(self.index.embeddings.astype(np.float32)).to(self.device)
        neg = cfg.negatives
        miner = HardNegativeMiner(neg.count, neg.hard_fraction, seed=self.seed, n_entities=len(self.index))
        if neg.kind == "sampled" and miner.hard_fraction > 0:
            miner.refresh(self.index.embeddings.astype(np.float32))
        self.linking = LinkingLoss(self.loss, neg.kind, miner, table)
        self.max_len, self.span_weight, self.label_weight = cfg.spans.max_len, cfg.spans.weight, cfg.spans.label_weight
        nlp = spacy.blank("en")
        train = read_docbin(nlp, p.train)
        require_gold_spans(p.train, train, "the span model would learn no span")
        if t.link_weight > 0:  # else the linking loss would silently be 0
            require_linkable(p.train, train, self.index)
        self.train_docs = [DocExample(d, self.index, self.max_len, self.encoder.tokenizer) for d in train]
        labels = sorted({label for ex in self.train_docs for _, label in ex.span_labels}) if cfg.spans.labels else []
        hidden = int(self.encoder.mention_model.config.hidden_size)
        scorer = load_span_scorer(checkpoint / SCORER_FILE) if checkpoint else SpanScorer(hidden, labels, cfg.spans.kind, cfg.spans.pooling)
        self.scorer = scorer.to(self.device)
        dev = read_docbin(nlp, p.dev) if p.dev else []
        if p.dev:
            require_gold_spans(p.dev, dev, "the span model would be selected on nothing")
            if t.select == "strict":  # else every model's strict F1 would be 0
                require_linkable(p.dev, dev, self.index)
        dev_docs = [DocExample(d, self.index, self.max_len, self.encoder.tokenizer) for d in dev[: t.eval_docs or len(dev)]]
        self.evaluator = SelectingEvaluator(dev_docs, self.index, primary_metric=f"{t.select}.f")
        self.done, self.labels = 0, None  # the steps done (the step a saved model is of); the learned label map
        self.per_epoch = math.ceil(len(self.train_docs) / t.batch_docs)
        self.total_steps = t.max_steps or int(t.epochs * self.per_epoch)

    # -------------------------------------------------------------- the Task interface
    @property
    def model(self) -> EndToEndModel:
        return EndToEndModel(self.encoder, self.scorer)

    def optimizer(self) -> torch.optim.Optimizer:
        t = self.cfg.training
        mention = [q for q in self.encoder.mention_model.parameters() if q.requires_grad]
        groups = [{"params": mention, "lr": t.lr}, {"params": list(self.scorer.parameters()), "lr": t.scorer_lr}]
        return torch.optim.AdamW(groups, weight_decay=t.weight_decay)

    def generators(self) -> Dict[str, np.random.Generator]:
        return {"negatives": self.linking.miner.rng}

    def train_mode(self) -> None:
        self.encoder.train()
        self.encoder.entity_model.eval()

    def batches(self, start: int) -> Iterator[List[DocExample]]:
        bd = self.cfg.training.batch_docs
        for step in range(start, self.total_steps):
            epoch, offset = divmod(step, self.per_epoch)
            order = np.random.default_rng(self.seed + 1000 * epoch).permutation(len(self.train_docs))
            yield [self.train_docs[i] for i in order[offset * bd : (offset + 1) * bd]]

    def start(self, step: int) -> None:
        self.done = step

    def before_step(self, step: int, batch: Any) -> None:
        self.done = step + 1

    def step(self, batch: Sequence[DocExample]) -> StepOutput:
        loss, link, span, label = self.losses(batch)
        return StepOutput(loss, {"link_loss": float(link.detach()), "span_loss": float(span.detach()),
                                 "label_loss": float(label.detach())})

    def save(self, folder: Path) -> None:
        """The model just evaluated, with its span report (:meth:`span_report`), into ``folder`` (``DIR/best``)."""
        self.encoder.save(folder)
        save_span_scorer(self.scorer, folder / SCORER_FILE)
        report = self.span_report(self.evaluator.choose_last() if self.evaluator.docs else None)
        (folder / REPORT_FILE).write_text(json_text(report, indent=2), encoding="utf8")

    def save_checkpoint(self, folder: Path) -> None:
        self.encoder.save(folder / "encoder")
        save_span_scorer(self.scorer, folder / SCORER_FILE)

    def span_report(self, chosen: Optional[Metrics]) -> Dict[str, Any]:
        """The report of the model of step ``self.done``: γ with the best strict span F1 on the dev docs
        (``chosen``: its scores; None with no dev docs: no γ, the span finder's default) and the label map."""
        if self.labels is None:
            self.labels = learn_labels([b.doc for b in self.train_docs], self.index)
        dev = {"threshold": chosen["threshold"], "dev": chosen} if chosen is not None else {}
        return {**dev, "dev_docs": len(self.evaluator.docs), "max_len": self.max_len, "best_step": self.done,
                "labels": self.labels}

    def finish(self, output: Path, state: Dict[str, Any]) -> None:
        """The best model's span report (γ: None with no dev docs) as ``state["span_report"]``; one saved before
        reports went with ``DIR/best`` gets its report now, written atomically."""
        best = output / "best"
        if not (best / REPORT_FILE).exists():
            self.encoder = BiEncoder.from_pretrained(best).to_device(str(self.device))
            self.scorer = load_span_scorer(best / SCORER_FILE, device=str(self.device))
            self.done = state["best_step"]
            report = self.span_report(self.evaluator.choose_threshold(self.model) if self.evaluator.docs else None)
            atomic_write(best / REPORT_FILE, lambda tmp: tmp.write_text(json_text(report, indent=2), encoding="utf8"))
        report = json.loads((best / REPORT_FILE).read_text(encoding="utf8"))
        state["span_report"] = report if self.evaluator.docs else None

    # -------------------------------------------------------------- the losses
    def losses(self, batch: Sequence[DocExample]):
        """(weighted total, linking loss, span loss, label loss) of a batch of documents."""
        hidden = encode_docs(self.encoder, [b.doc for b in batch], batch_size=len(batch), grad=True, pooling=self.scorer.pooling)
        logits, labels, vecs, gold, label_logits, label_gold = [], [], [], [], [], []
        link_on = self.cfg.training.link_weight > 0
        names = {name: i for i, name in enumerate(self.scorer.labels)}
        bio = self.scorer.kind == "bio"
        for ex, H in zip(batch, hidden):
            if bio and len(ex.tags):
                logits.append(self.scorer.tag_logits(H))
                labels.append(bio_targets(ex.tags, H))  # whitespace tokens' tags ignored: no span reads them
            elif not bio and len(ex.starts):
                logits.append(self.scorer(H, ex.starts, ex.ends))
                labels.append(torch.from_numpy(ex.labels).to(H.device))
            known = [(i, names[x]) for i, x in ex.span_labels if x in names]
            if known:
                idx = [i for i, _ in known]
                label_logits.append(self.scorer.label_logits(H, ex.starts[idx], ex.ends[idx]))
                label_gold.extend(k for _, k in known)
            if link_on and ex.linked:
                # as in the retriever: raw means for a dot-product loss (a normalised query would cap
                # its logits at ±1), unit vectors for a cosine one; rankings are the same
                vecs.append(span_means(H, [s for s, _, _ in ex.linked], [e for _, e, _ in ex.linked]))
                gold.extend(rows for _, _, rows in ex.linked)
        zero = torch.zeros((), device=self.device)
        span_loss = F.cross_entropy if bio else F.binary_cross_entropy_with_logits
        span = span_loss(torch.cat(logits).float(), torch.cat(labels)) if logits else zero
        label = zero
        if label_logits:
            label = F.cross_entropy(torch.cat(label_logits), torch.tensor(label_gold, device=self.device))
        link = zero
        if vecs:
            m = torch.cat(vecs)
            link = self.linking(F.normalize(m, dim=-1) if self.loss.kind == "cosine" else m, gold)
        total = self.cfg.training.link_weight * link + self.span_weight * span + self.label_weight * label
        return total, link, span, label


def run_joint(cfg: JointConfig, output: Path, progress: bool = True) -> Dict[str, Any]:
    """Train the joint model ``cfg`` describes into ``output``; returns the loop's final state."""
    checkpoint = checkpoint_to_resume(output, cfg.training.resume)
    return TrainingLoop(JointTask(cfg, checkpoint), cfg.training, output, checkpoint).run(progress)


def train_e2e(config: PathLike, output: PathLike, overrides: Optional[dict] = None, progress: bool = True) -> Dict[str, Any]:
    """Train as the config file ``config`` (with ``overrides``) says; the resolved config is saved as
    ``output/config.cfg``. Returns the final state (steps, best dev strict F1, history, γ report). The
    output's lock is held throughout (:func:`~.run_config.run_lock`)."""
    with run_lock(output):
        cfg, output = config_for_run(JointConfig, config, output, overrides)
        return run_joint(cfg, output, progress)


def train_e2e_seeds(config: PathLike, output: PathLike, seeds: int = 1, overrides: Optional[dict] = None,
                    progress: bool = True) -> List[Dict[str, Any]]:
    """Train ``seeds`` span models into ``output`` (the first as :func:`train_e2e` does, the k-th with
    ``training.seed`` + k in ``output/seeds/<k>``) and list their ``best`` folders in
    ``output/span_models.json``; a model whose run finished resumes at its end. Returns each run's state.
    The list is removed first and written once all have trained: a run killed midway leaves ``output``
    standing for its ``best`` alone, never for an earlier run's further models. ``output``'s lock is held
    throughout, over all the models (:func:`~.run_config.run_lock`)."""
    if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
        raise ValueError(f"seeds must be an integer ≥ 1, not {seeds!r}")
    overrides, output = dict(overrides or {}), Path(output)
    with run_lock(output):
        base = JointConfig.from_config(load_config(config, overrides), str(config)).training.seed
        folders = [output] + [output / SEEDS_DIR / str(k) for k in range(1, seeds)]
        (output / MODELS_FILE).unlink(missing_ok=True)
        states = [train_e2e(config, folder, {**overrides, **({"training.seed": base + k} if k else {})}, progress)
                  for k, folder in enumerate(folders)]
        write_models_file(output, [folder / "best" for folder in folders])
        return states
