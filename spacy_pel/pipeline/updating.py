"""Training ``pel_linker`` inside spaCy's own loop (``spacy train``, ``nlp.update``).

The component trains its mention tower with the objective of the project's trainer
(:class:`~spacy_pel.models.linking.LinkingLoss`: the same losses and negatives as ``python -m
spacy_pel train``) against the KB's stored entity vectors: the entity tower is frozen, so the KB
stays valid (same fingerprint) and no entity is ever encoded during training.

* ``spacy_pel.objective.v1`` -- the loss (``loss``: ``proxy``, ``ce`` or ``ce_cosine``, its settings
  in ``loss_settings``) and the negatives (``negatives``: ``sampled``, ``in_batch`` or ``kb``;
  ``count``, ``hard_fraction``, ``seed``), as the ``[loss]`` and ``[negatives]`` blocks of a
  training config; ``lr_scale`` scales spaCy's learning rate for the mention tower; ``max_mentions``
  (> 0) trains each update on that many of the batch's mentions, drawn at random: with batches of
  many documents, 32 mentions from across them, as the project trainer's batches (whole documents of
  ~19 mentions each would put only 1–2 abstracts, and few distinct entities, in a batch);
* :func:`linkable_mentions` -- the mentions to learn from and their gold KB rows (shared with the
  project's trainer); :func:`example_mentions` -- which spans of spaCy examples those are;
* :class:`Updater` -- the training state a linker holds: its objective bound to the KB, and a torch
  optimizer;
* ``spacy_pel.batch_by_mentions.v1`` -- a batcher filling each batch with about ``size`` gold
  mentions (the project's trainer counts its batches in mentions, spaCy's batchers in docs or words).

**spaCy's optimizer.** ``sgd`` is a thinc optimizer and cannot step torch weights, so the component
keeps its own ``torch.optim.AdamW`` over the mention tower and, at every ``finish_update(sgd)``, takes
its settings from ``sgd``: ``learn_rate`` × the objective's ``lr_scale`` (with any
``[training.optimizer.learn_rate]`` schedule, which spaCy steps), ``L2`` as decoupled weight decay, ``beta1``/``beta2``/``eps``, and ``grad_clip``
as a clip of the global gradient norm, as the project's trainer clips. Without ``sgd`` (``update``
called alone) gradients accumulate until a ``finish_update``. ``drop`` is not used: the transformer
keeps its own dropout, as in the project's trainer.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np
import torch
from spacy.tokens import Doc
from spacy.training import Example, validate_examples
from spacy.util import registry

from ..corpora import NIL, gold_ids, gold_spans
from ..files import InputError
from ..models.encoder import BiEncoder, Mention
from ..models.linking import NEGATIVE_KINDS, LinkingLoss
from ..models.losses import LOSSES, Loss, make_loss
from ..models.negatives import HardNegativeMiner
from ..retrieval.index import EntityIndex
from .mentions import linked_gold

log = logging.getLogger(__name__)

Gold = Tuple[str, int, int, str]  # (text, start char, end char, gold kb_id) of one mention
DEFAULT_LR = 2e-5  # when finish_update gets no thinc optimizer (the project trainer's default)


@dataclass(frozen=True)
class Objective:
    """The loss and the negatives ``update`` trains with (see the module doc)."""

    loss: Loss
    negatives: str = "sampled"
    count: int = 32
    hard_fraction: float = 0.0
    seed: int = 0
    lr_scale: float = 1.0
    max_mentions: int = 0

    def __post_init__(self):
        if self.negatives not in NEGATIVE_KINDS:
            raise ValueError(f"spacy_pel.objective.v1: `negatives` must be one of {NEGATIVE_KINDS}, not {self.negatives!r}")
        if not isinstance(self.count, int) or self.count < 1 or not 0.0 <= self.hard_fraction <= 1.0:
            raise ValueError(f"spacy_pel.objective.v1: need `count` ≥ 1 and 0 ≤ `hard_fraction` ≤ 1, got {self.count!r}, {self.hard_fraction!r}")
        if not isinstance(self.max_mentions, int) or self.max_mentions < 0:
            raise ValueError(f"spacy_pel.objective.v1: `max_mentions` must be an integer ≥ 0, not {self.max_mentions!r}")
        if not self.lr_scale > 0:
            raise ValueError(f"spacy_pel.objective.v1: `lr_scale` must be > 0, not {self.lr_scale!r}")


@registry.misc("spacy_pel.objective.v1")
def make_objective(loss: str = "proxy", loss_settings: Dict[str, float] = {}, negatives: str = "sampled",
              count: int = 32, hard_fraction: float = 0.0, seed: int = 0, lr_scale: float = 1.0,
                   max_mentions: int = 0) -> Objective:
    """The training objective of ``pel_linker.update``: ``loss`` with ``loss_settings`` (proxy:
    ``alpha``, ``delta``; ce_cosine: ``scale``; those of other losses are ignored, as in ``[loss]``)
    and ``count`` negatives per mention of the kind ``negatives``, ``hard_fraction`` of them hard
    (FAISS over the KB's vectors); the mention tower's learning rate is spaCy's ``learn_rate`` ×
    ``lr_scale`` (e.g. 0.05 beside an NER at 0.001); with ``max_mentions`` > 0 an update trains on
    that many of the batch's mentions, drawn at random."""
    known = {k for spec in LOSSES.values() for k in spec.defaults}  # one block serves every loss, as [loss]
    unknown = sorted(set(loss_settings) - known)
    if unknown:
        raise ValueError(f"spacy_pel.objective.v1: no loss has the setting(s) {unknown}; settings: {sorted(known)}")
    mine = {k: v for k, v in loss_settings.items() if loss not in LOSSES or k in LOSSES[loss].defaults}
    return Objective(make_loss(loss, **mine), negatives, count, float(hard_fraction), seed, float(lr_scale), max_mentions)


# ------------------------------------------------------------------ the mentions to learn from
def linkable_mentions(items: Iterable[Gold], row: Mapping[str, int]) -> Tuple[List[Mention], List[Set[int]], Dict[str, int]]:
    """Mentions whose gold ids are in the KB (``row``: id → KB row) and their gold rows; NIL and
    absent ids are counted in the third value (``nil``, ``absent``), not used."""
    mentions, gold, skipped = [], [], {"nil": 0, "absent": 0}
    for text, start, end, kb_id in items:
        ids = gold_ids(kb_id)
        rows = {row[i] for i in ids if i in row}
        if ids == [NIL]:
            skipped["nil"] += 1
        elif not rows:
            skipped["absent"] += 1
        else:
            mentions.append(Mention(text, start, end))
            gold.append(rows)
    return mentions, gold, skipped


def check_linkable(source: str, linkable: int, skipped: Dict[str, int], kb_entities: int) -> None:
    """Refuse a corpus (``source``) none of whose gold mentions has an id in the KB (``InputError``), and
    warn when most of its ids are absent: a corpus annotated against another KB, or ids in another
    spelling. ``linkable`` and ``skipped``: :func:`linkable_mentions`'s counts over the corpus."""
    absent, nil = skipped["absent"], skipped["nil"]
    hint = ("was it annotated against another KB, or are its ids spelled otherwise? (`convert --id-map` / "
            "`--strip-id-prefix` rewrite them)")
    if not linkable:
        raise InputError(f"{source}: none of its gold mentions has an id in the KB ({kb_entities} entities; {absent} "
                         f"with ids it lacks, {nil} NIL); {hint}")
    if absent > linkable:
        log.warning(f"{source}: {absent} gold mentions have ids the KB lacks and are left out, against {linkable} "
                    f"linkable; {hint}")


def check_negatives(source: str, gold: Sequence[Set[int]], kb_entities: int) -> None:
    """Refuse (``InputError``) to train on gold mentions whose gold rows (``gold``, :func:`linkable_mentions`'s)
    are every one of the KB's ``kb_entities`` rows — any mention of a 1-entity KB, a composite mention ``D1|D2``
    of a 2-entity KB —: their negatives are other entities, and there is none."""
    whole = sum(len(rows) >= kb_entities for rows in gold)
    if whole:
        raise InputError(f"{source}: {whole} of its {len(gold)} linkable gold mentions {'has' if whole == 1 else 'have'} every one of the KB's "
                         f"{kb_entities} entit{'y' if kb_entities == 1 else 'ies'} as gold ids, leaving no other entity "
                         "to be their negative; training needs a larger KB (or leave those mentions out)")


def require_linked_gold(path, docs: Sequence[Doc], source, name: str, purpose: str) -> None:
    """Refuse (``InputError``) a corpus with gold mentions none of which has a label that the pel_linker ``name``
    links (its mention ``source``: one linker per KB, of some labels only), before any linking: ``purpose`` says
    what there is then nothing to do. A corpus with no gold mention at all is left to its command."""
    if not any(gold_spans(doc) for doc in docs) or any(linked_gold(source, doc) for doc in docs):
        return
    labels = ", ".join(sorted(getattr(source, "labels", None) or ())) or "none"
    raise InputError(f"{path}: none of its gold mentions has a label the linker {name} links ({labels}): nothing to "
                     f"{purpose}; give --linker the pel_linker of their labels")


def doc_gold_mentions(doc: Doc, source=None) -> List[Gold]:
    """``(doc text, start, end, gold id)`` of every gold mention of ``doc`` (with a mention ``source``: of those
    it links, :func:`~spacy_pel.pipeline.mentions.linked_gold`)."""
    spans = gold_spans(doc) if source is None else linked_gold(source, doc)
    return [(doc.text, s.start_char, s.end_char, s.kb_id_) for s in spans]


def example_mentions(examples: Iterable[Example], use_gold_ents: bool, source) -> Iterator[Gold]:
    """The reference's gold mentions that the mention ``source`` links (``use_gold_ents``), or the spans it
    links in the predicted doc (``source.spans(doc)``, e.g. ``doc.ents`` set by an NER) whose offsets match a
    gold mention, with its gold id."""
    for eg in examples:
        ref = eg.reference
        if use_gold_ents:
            yield from doc_gold_mentions(ref, source)
            continue
        gold = {(s.start_char, s.end_char): s.kb_id_ for s in gold_spans(ref)}
        for s in source.spans(eg.predicted):
            if (s.start_char, s.end_char) in gold:
                yield eg.predicted.text, s.start_char, s.end_char, gold[(s.start_char, s.end_char)]


# ------------------------------------------------------------------ the training state
@dataclass
class Updater:
    """What a linker needs to train: its objective bound to the KB (built on the first update, and
    again when the linker gets another encoder or KB), the torch optimizer, and counts."""

    objective: Objective
    counts: Dict[str, int] = field(default_factory=lambda: {"updates": 0, "steps": 0, "mentions": 0})
    _bound: Optional[Tuple[int, int]] = None
    _linking: Optional[LinkingLoss] = None
    _optimizer: Optional[torch.optim.Optimizer] = None
    _rng: Optional[np.random.Generator] = None

    @classmethod
    def for_objective(cls, objective: Optional[Objective]) -> "Updater":
        """An updater for ``objective`` (None: the default of ``spacy_pel.objective.v1``)."""
        if objective is not None and not isinstance(objective, Objective):
            raise ValueError(f'pel_linker: `objective` must be a block such as {{"@misc": "spacy_pel.objective.v1"}}, not {objective!r}')
        return cls(objective if objective is not None else make_objective())

    def bind(self, encoder: BiEncoder, index: EntityIndex) -> LinkingLoss:
        """The linking loss over ``index``'s stored vectors, the entity tower of ``encoder`` frozen."""
        if self._bound != (id(encoder), id(index)) or self._linking is None:
            obj = self.objective
            encoder.entity_model.requires_grad_(False)
            table = torch.from_numpy(np.asarray(index.embeddings, dtype=np.float32)).to(encoder.device_)
            miner = HardNegativeMiner(obj.count, hard_fraction=obj.hard_fraction, seed=obj.seed, n_entities=len(index))
            if obj.hard_fraction > 0:
                miner.refresh(np.asarray(index.embeddings, dtype=np.float32))
            self._linking = LinkingLoss(obj.loss, obj.negatives, miner, table)
            params = [p for p in encoder.mention_model.parameters() if p.requires_grad]
            self._optimizer = torch.optim.AdamW(params, lr=DEFAULT_LR)
            self._bound = (id(encoder), id(index))
        return self._linking

    def check_examples(self, linker, examples: Iterable[Example]) -> None:
        """Refuse, before training, examples whose gold mentions leave no negative (:func:`check_negatives`)."""
        items = [g for eg in examples for g in doc_gold_mentions(eg.reference, linker.mentions)]
        check_negatives(f"{linker.name}: the training examples", linkable_mentions(items, linker.index.lookup)[1],
                        len(linker.index))

    def mentions(self, linker, examples: Sequence[Example], sample: bool = False) -> Tuple[List[Mention], List[Set[int]]]:
        """The batch's linkable mentions and gold rows; with ``sample``, at most ``max_mentions`` of them."""
        items = example_mentions(examples, linker.cfg.use_gold_ents, linker.mentions)
        mentions, gold, _ = linkable_mentions(items, linker.index.lookup)
        most = self.objective.max_mentions
        if sample and most and len(mentions) > most:
            if self._rng is None:
                self._rng = np.random.default_rng(self.objective.seed + 1)
            keep = np.sort(self._rng.choice(len(mentions), most, replace=False))
            mentions, gold = [mentions[i] for i in keep], [gold[i] for i in keep]
        return mentions, gold

    def loss_and_gradient(self, linker, vectors: torch.Tensor, gold: Sequence[Set[int]]) -> Tuple[float, torch.Tensor]:
        """The objective's loss on mention ``vectors`` and its gradient with respect to them."""
        linking = self.bind(linker.encoder, linker.index)
        leaf = vectors.detach().requires_grad_(True)
        with torch.enable_grad():
            loss = linking(leaf, gold)
            (grad,) = torch.autograd.grad(loss, leaf)
        return float(loss.detach()), grad

    def get_loss(self, linker, examples: Iterable[Example], vectors: torch.Tensor) -> Tuple[float, torch.Tensor]:
        """spaCy's ``get_loss``: the loss of the batch's linkable mentions, whose ``vectors`` (in
        :meth:`mentions` order) are given, and the gradient for them."""
        linker.ensure_loaded()
        _, gold = self.mentions(linker, list(examples))
        if len(gold) != len(vectors):
            raise ValueError(f"{len(vectors)} mention vectors for {len(gold)} linkable mentions")
        return self.loss_and_gradient(linker, vectors, gold)

    def update(self, linker, examples: Iterable[Example], *, sgd=None, losses: Optional[Dict[str, float]] = None) -> Dict[str, float]:
        """Back-propagate the loss of the batch's linkable mentions into the mention tower."""
        losses = {} if losses is None else losses
        losses.setdefault(linker.name, 0.0)
        examples = list(examples)
        validate_examples(examples, "PELLinker.update")
        linker.ensure_loaded()
        mentions, gold = self.mentions(linker, examples, sample=True)
        if mentions:
            encoder = linker.encoder
            self.bind(encoder, linker.index)
            normalize = self.objective.loss.kind == "cosine"  # as the project's trainer (frozen tower)
            was_training = encoder.training
            encoder.mention_model.train()
            try:
                vectors = encoder.embed_mentions(encoder.mention_inputs(mentions), normalize=normalize)
                loss, grad = self.loss_and_gradient(linker, vectors, gold)
                vectors.backward(grad)
            finally:
                encoder.train(was_training)
            losses[linker.name] += loss
            linker.sources["encoder"] = None  # trained here: no longer the weights of a path
            self.counts["updates"] += 1
            self.counts["mentions"] += len(mentions)
        if sgd not in (None, False):
            self.finish_update(sgd)
        return losses

    def finish_update(self, sgd) -> None:
        """One AdamW step with the settings of spaCy's optimizer ``sgd`` (module doc), then zero grads."""
        if self._optimizer is None:
            return
        params = [p for g in self._optimizer.param_groups for p in g["params"]]
        decay = float(getattr(sgd, "L2", 0.01)) if getattr(sgd, "L2_is_weight_decay", True) else 0.0
        for group in self._optimizer.param_groups:
            group.update(lr=float(getattr(sgd, "learn_rate", DEFAULT_LR)) * self.objective.lr_scale, weight_decay=decay,
                         betas=(float(getattr(sgd, "b1", 0.9)), float(getattr(sgd, "b2", 0.999))),
                         eps=float(getattr(sgd, "eps", 1e-8)))
        clip = float(getattr(sgd, "grad_clip", 1.0) or 0.0)
        if clip:
            torch.nn.utils.clip_grad_norm_(params, clip)
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        self.counts["steps"] += 1


# ------------------------------------------------------------------ batches of about N mentions
@registry.batchers("spacy_pel.batch_by_mentions.v1")
def batch_by_mentions(size: int = 32) -> Callable[[Iterable[Example]], Iterator[List[Example]]]:
    """Batches of whole examples holding about ``size`` gold mentions each: an example joins the
    batch unless that overshoots ``size`` by more than the batch now falls short of it."""
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"spacy_pel.batch_by_mentions.v1: `size` must be an integer ≥ 1, not {size!r}")

    def batcher(examples: Iterable[Example]) -> Iterator[List[Example]]:
        batch: List[Example] = []
        n = 0
        for eg in examples:
            k = len(gold_spans(eg.reference))
            if batch and n + k - size > size - n:
                yield batch
                batch, n = [], 0
            batch.append(eg)
            n += k
            if n >= size:
                yield batch
                batch, n = [], 0
        if batch:
            yield batch

    return batcher
