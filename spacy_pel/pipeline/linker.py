"""The ``pel_linker`` pipeline component: bi-encoder retrieval over a FAISS entity index.

For every mention (from its mention source: ``doc.ents``, a span group, or its own span finder) it
computes a vector in context (its vector strategy), retrieves the ``top_k`` nearest entities, lets its
candidate rules adjust them, sets the span's ``kb_id_`` to the best one — or to ``nil_label`` when
its NIL strategy's confidence (by default the best score; :mod:`.nil`) is below ``threshold``, or
when the span has no word character — and keeps the candidates as ``span._.pel_candidates``: a list
of ``[id, name, score]``, best first, and the confidence as ``span._.pel_confidence``.

The config is the one source of truth for settings (:mod:`.config`); the component's folder in a
saved pipeline holds only weights and data: the encoder, the KB, and the parts' files (span scorer,
alias counts), plus ``sources.json`` — the configured paths they came from, so that a config naming
another path at load time is followed rather than silently ignored — and ``settings.json``, the settings it
was saved with, compared (never applied) when it is read back (:mod:`.settings_record`). Resources are loaded lazily
from the config paths, by ``initialize(kb_path=…)``, or from the pipeline folder by ``from_disk``;
a saved pipeline never reaches for the network.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import spacy
import torch
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.util import minibatch
from spacy.vocab import Vocab

from ..files import InputError
from ..models.encoder import BiEncoder, EncoderMismatchError
from ..retrieval.index import EntityIndex
from .batches import link_batch
from .config import LinkerPart, LinkerSettings, warn_unsaved
from .contracts import CandidateRule, MentionSource, NilStrategy, VectorStrategy, check_part
from .folder import LinkerFolder
from .linked import Linked, per_doc, search_depth
from .mentions import DocSpans, Found, spans_at
from .nil import TopScoreNil, nil_features, threshold_range
from .rules.batch import DECIDED_SCORE, CandidateBatch
from .scoring import score_linker
from .settings_record import remember_owner
from .span_data import CANDIDATES_ATTR, CONFIDENCE_ATTR, attach
from .updating import Objective, Updater
from .vectors import per_mention_vectors


def _one_torch_thread() -> None:
    """In a forked child (spaCy's ``nlp.pipe(n_process=N)``): one torch thread. The parent's OpenMP
    pool does not survive the fork, and its first parallel op would wait forever on a barrier of
    threads that no longer exist; N processes are the parallelism there anyway."""
    torch.set_num_threads(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_one_torch_thread)


@Language.factory(
    "pel_linker",
    default_config={
        **LinkerSettings().as_config(),
        "mentions": {"@misc": "spacy_pel.mentions.ents.v1"},
        "vectors": {"@misc": "spacy_pel.vectors.per_mention.v1"},
        "rules": {},
        "nil": {"@misc": "spacy_pel.nil.top_score.v1"},
        "objective": {"@misc": "spacy_pel.objective.v1"},
        "scorer": {"@scorers": "spacy_pel.linker_scorer.v1"},
    },
    assigns=["doc.ents", "token.ent_kb_id", f"span._.{CANDIDATES_ATTR}", f"span._.{CONFIDENCE_ATTR}"],
    requires=["doc.ents"],
    default_score_weights={"nel_micro_f": 1.0, "nel_micro_p": None, "nel_micro_r": None, "pel_r1": 0.0},
)
def make_pel_linker(
    nlp: Language, name: str, kb: Optional[str], encoder: Optional[str], top_k: int, threshold: Optional[float],
    nil_label: str, batch_size: int, context_window: int, device: str, precision: str, search_precision: str,
    use_gold_ents: bool, mentions: Any, vectors: Callable, rules: Dict[str, Any], nil: Callable, objective: Objective,
    scorer: Optional[Callable],
) -> "PELLinker":
    """Create a ``pel_linker`` (settings: :class:`.config.LinkerSettings`; ``mentions``: a source of
    :mod:`.mentions`; ``vectors``: a strategy of :mod:`.vectors`; ``rules``: named rules of :mod:`.rules`;
    ``nil``: how NIL is decided, :mod:`.nil`; ``objective``: what ``update`` trains with, :mod:`.updating`;
    ``scorer``: :mod:`.scoring`). The parts are checked against :mod:`.contracts`."""
    settings = LinkerSettings(kb=kb, encoder=encoder, top_k=top_k, threshold=threshold, nil_label=nil_label, batch_size=batch_size,
                              context_window=context_window, device=device, precision=precision,
                              search_precision=search_precision, use_gold_ents=use_gold_ents)
    linker = PELLinker(nlp.vocab, name, settings, mentions=mentions, vectors=vectors, rules=rules, nil=nil, objective=objective,
                       scorer=scorer)
    remember_owner(linker, nlp)  # its config's parts are recorded with what it saves (:mod:`.settings_record`)
    return linker


def find_linker(nlp: Language, name: Optional[str] = None) -> Tuple[str, "PELLinker"]:
    """The (name, component) of the pipeline's enabled pel_linker called ``name``, else its first (one per KB
    is allowed); a disabled one (``nlp.disable_pipe``, a config's ``[nlp] disabled``) is refused as such."""
    linkers = {n: proc for n, proc in nlp.pipeline if isinstance(proc, PELLinker)}
    off = [n for n, proc in nlp.components if isinstance(proc, PELLinker) and n in nlp.disabled]
    if (name is not None and name in off) or (name is None and not linkers and off):
        raise InputError(f"pel_linker {name or off[0]!r} is disabled in this pipeline (nlp.disable_pipe, or [nlp] disabled "
                         f"in its config.cfg): remove it from [nlp] disabled, or call nlp.enable_pipe({name or off[0]!r}) first")
    if name is not None and name not in linkers:
        listed = [*linkers, *(f"{n} (disabled)" for n in off)]
        raise InputError(f"the pipeline has no pel_linker called {name!r}; its pel_linkers: {', '.join(listed) or 'none'}")
    if not linkers:
        raise InputError("the pipeline has no pel_linker")
    name = name if name is not None else next(iter(linkers))
    return name, linkers[name]


def load_pipeline(pipeline=None, kb=None, encoder: Optional[str] = None,
                  linker: Optional[str] = None) -> Tuple[Language, "PELLinker"]:
    """A saved pipeline (``spacy.load``) and its pel_linker (``linker``: the one of that name), or a blank
    English one linking against a KB folder."""
    if pipeline is not None:
        nlp = spacy.load(pipeline)
        return nlp, find_linker(nlp, linker)[1]
    if kb is None:
        raise ValueError("give a saved pipeline or a KB folder")
    nlp = spacy.blank("en")
    return nlp, nlp.add_pipe("pel_linker", config={"kb": str(kb), "encoder": encoder})


def configure_linker(nlp: Language, name: Optional[str] = None, **settings) -> "PELLinker":
    """Change settings of the pipeline's pel_linker (e.g. ``threshold=0.7``) in the component (and in the
    encoder and KB it holds: ``LinkerFolder.reconfigure``) and in ``nlp.config``, so that ``nlp.to_disk``
    writes them into ``config.cfg``, which ``spacy.load`` reads."""
    name, linker = find_linker(nlp, name)
    before, linker.cfg = linker.cfg, linker.check_threshold(linker.cfg.replace(**settings))
    settings = {k: getattr(linker.cfg, k) for k in settings}  # as checked: str paths, Python numbers
    try:
        linker.reconfigure(settings)
    except Exception:
        linker.cfg = before  # refused (another encoder's KB …): the component stays as it was, as nlp.config
        raise
    nlp.get_pipe_config(name).update(settings)
    return linker


class PELLinker(LinkerFolder, Pipe):
    def __init__(
        self, vocab: Vocab, name: str = "pel_linker", settings: Optional[LinkerSettings] = None, *,
        mentions: Optional[MentionSource] = None, vectors: Optional[VectorStrategy] = None,
        rules: Optional[Dict[str, CandidateRule]] = None, nil: Optional[NilStrategy] = None, objective: Optional[Objective] = None,
        scorer: Optional[Callable] = None, **overrides,
    ):
        self.vocab, self.name = vocab, name
        self.cfg = (settings or LinkerSettings()).replace(**overrides)
        self.mentions = check_part(DocSpans(None) if mentions is None else mentions, "mentions", MentionSource,
                                   '{"@misc": "spacy_pel.mentions.ents.v1"}')
        self.vectors = check_part(vectors or per_mention_vectors, "vectors", VectorStrategy, '{"@misc": "spacy_pel.vectors.collective.v1"}')
        if not isinstance(rules or {}, dict):
            raise ValueError(f"pel_linker: `rules` must be a block of named rules, not {rules!r}")
        self.rules = {k: check_part(r, f"rules.{k}", CandidateRule, '{"@misc": "spacy_pel.rules.alias_table.v1"}')
                      for k, r in (rules or {}).items()}
        self.nil = check_part(nil or TopScoreNil(), "nil", NilStrategy, '{"@misc": "spacy_pel.nil.classifier.v1"}')
        names = [p.data_name for _, p in self.parts() if p.data_name]  # parts holding no data clash with none
        if len(set(names)) != len(names):
            raise ValueError(f"pel_linker: two parts keep data under the same name ({names})")
        self.encoder: Optional[BiEncoder] = None
        self.index: Optional[EntityIndex] = None
        self.sources: Dict[str, Optional[str]] = {}  # configured path each held resource came from
        self.updater, self.scorer = Updater.for_objective(objective), scorer
        self.check_threshold()  # against the configured KB's metric, before it loads

    # ------------------------------------------------------------------ settings
    @property
    def top_k(self) -> int:
        return self.cfg.top_k

    @top_k.setter
    def top_k(self, value: int) -> None:  # this object only (with a warning); configure_linker: nlp.config too
        self.cfg, _ = self.cfg.replace(top_k=value), warn_unsaved("top_k")

    @property
    def threshold(self) -> Optional[float]:
        return self.cfg.threshold

    @threshold.setter
    def threshold(self, value: Optional[float]) -> None:  # a refused value is not kept
        self.cfg, _ = self.check_threshold(self.cfg.replace(threshold=value)), warn_unsaved("threshold")

    def check_threshold(self, cfg: Optional[LinkerSettings] = None) -> LinkerSettings:
        """``cfg`` (default: the component's), refused if its threshold is outside the KB's score range."""
        cfg, t = cfg or self.cfg, (cfg or self.cfg).threshold
        span = threshold_range(self.nil, self.rules.values(), self._metric(cfg)) if t is not None else None
        if span is not None and not span[0] <= t <= span[1]:
            raise ValueError(f"{self.name}: threshold {t} is outside [{span[0]:g}, {span[1]:g}], the range of the best "
                             "candidate's cosine score, which the NIL confidence is (null: never NIL)")
        return cfg

    def _metric(self, cfg: LinkerSettings) -> Optional[str]:
        """The score metric of the KB held, else of the configured KB folder (its meta.json; None: not known yet)."""
        if self.index is not None:
            return self.index.metric
        try:
            return EntityIndex.read_meta(cfg.kb).get("metric") if cfg.kb else None
        except (OSError, ValueError):
            return None  # a missing or damaged folder is reported when it is loaded

    def parts(self) -> List[Tuple[str, LinkerPart]]:
        """The parts holding data, with their keys in ``sources.json``."""
        found = [("mentions", self.mentions)] + [(f"rules.{k}", r) for k, r in self.rules.items()]
        return [(key, part) for key, part in found if isinstance(part, LinkerPart)]

    # ------------------------------------------------------------------ resources
    def set_resources(self, encoder: BiEncoder, index: EntityIndex, *, sources: Optional[dict] = None) -> None:
        """Use an in-memory encoder and KB (refused if the KB was built with another encoder)."""
        index.check_encoder(encoder)
        self.cfg.check_encoder(encoder)
        encoder.config.mention_max_length, encoder.config.precision = self.cfg.context_window, self.cfg.precision
        held = self.encoder, self.index, dict(self.sources)
        self.encoder, self.index = encoder.to_device(self.cfg.device), index
        self.sources.update(sources or {"kb": None, "encoder": None})
        try:
            self.check_threshold()
            for _, part in self.parts():
                part.setup(self.encoder, index)
        except Exception:  # refused (a rule's data of another KB …): every part back on what was held
            self.encoder, self.index, self.sources = held
            if self.encoder is not None and self.index is not None:
                for _, part in self.parts():
                    part.setup(self.encoder, self.index)
            raise

    def _load(self, kb: Optional[str] = None, encoder: Optional[str] = None) -> None:
        """Complete the resources: ``kb``/``encoder`` are paths asked for (a path the held resource
        came from keeps it); what is still missing comes from the config, the encoder last from the KB."""
        index, kb_src = self.index, self.sources.get("kb")
        if kb and (index is None or kb != kb_src):
            index, kb_src = EntityIndex.from_disk(kb, self.cfg.search_precision), kb
        if index is None:
            if not self.cfg.kb:
                raise ValueError(f"{self.name} has no KB: set config {{'kb': KB_DIR}} or call initialize(kb_path=KB_DIR)")
            index, kb_src = EntityIndex.from_disk(self.cfg.kb, self.cfg.search_precision), self.cfg.kb
        model, enc_src = self.encoder, self.sources.get("encoder")
        if encoder and (model is None or encoder != enc_src):
            model, enc_src = BiEncoder.from_pretrained(encoder), encoder
        kept = model is not None and model is self.encoder
        if model is None:
            enc_src = self.cfg.encoder or index.encoder_source
            if not enc_src:
                raise ValueError(f"{kb_src} records no encoder; set the component's `encoder`")
            model = BiEncoder.from_pretrained(enc_src)
        try:
            self.set_resources(model, index, sources={"kb": kb_src, "encoder": enc_src})
        except EncoderMismatchError as err:
            if not kept:
                raise
            raise EncoderMismatchError(
                f"{self.name} keeps the encoder it holds, and KB {kb_src} does not match it: {err} "
                "To link with the KB's own encoder instead, give it explicitly (config `encoder` or "
                "initialize(encoder=...))."
            ) from err

    def ensure_loaded(self) -> None:
        """Load what is missing (from the config's paths) so the component can link."""
        if self.index is None or self.encoder is None:
            self._load()

    def initialize(
        self,
        get_examples: Optional[Callable[[], Iterable[Example]]] = None,
        *,
        nlp: Optional[Language] = None,
        kb_path: Optional[str] = None,
        encoder: Optional[str] = None,
    ) -> None:
        """Load the KB (``kb_path``, else the one held, else the config's ``kb``) and the encoder
        (``encoder``, else the one held, else the config's or the KB's). A pipeline that holds its
        resources keeps them when initialize names no other KB; a new KB must match the held
        encoder's fingerprint unless ``encoder`` is given. With ``get_examples`` (training), gold mentions that
        leave no other KB entity to be their negative are refused (:meth:`.updating.Updater.check_examples`)."""
        self._load(str(kb_path) if kb_path else None, str(encoder) if encoder else None)
        if get_examples is not None:  # spacy train: mentions no negative can be drawn for are refused up front
            self.updater.check_examples(self, get_examples())

    # ------------------------------------------------------------------ linking
    def predict(self, docs: Sequence[Doc], k: Optional[int] = None) -> List[Tuple[list, Linked]]:
        """Per doc: ([(start, end, label)], :class:`Linked`) — the spans linked (from the mention
        source), their top-k (scores, KB rows) arrays, best first (rows -1 = no entity), and their NIL confidence."""
        self.ensure_loaded()
        found = self.mentions.find(docs, self.encoder, self.cfg.batch_size)
        found = found if isinstance(found, Found) else Found(*found)  # a source's (spans, hidden[, probs])
        return list(zip(found.spans, self.candidates(docs, found.spans, k, found.hidden, found.probs)))

    def candidates(
        self, docs: Sequence[Doc], spans: Sequence[list], k: Optional[int] = None, hidden: Optional[list] = None,
        span_probs: Optional[Sequence[Sequence[float]]] = None,
    ) -> List[Linked]:
        """Top-k (scores, rows) and NIL confidence per doc for the given spans (per doc ``(start, end,
        label)``), after the rules; mentions without a word character get none (row -1). ``span_probs``:
        per doc the span model's probability of each span (the NIL evidence's ``span``; else 1)."""
        self.ensure_loaded()
        k = k or self.cfg.top_k  # kept; searched: at least the runner-up too, for the NIL evidence (:mod:`.linked`)
        texts = [d[a:b].text for d, sp in zip(docs, spans) for a, b, _ in sp]
        batch = CandidateBatch(docs, spans, list(texts), None, None, None, self.index)
        for rule in self.rules.values():
            if hasattr(rule, "prepare"):
                rule.prepare(batch)
        wordless = {i for i, text in enumerate(texts) if not any(c.isalnum() for c in text)}
        todo = np.array([i for i in range(len(texts)) if batch.open(i) and i not in wordless], dtype=np.int64)
        batch.vectors, batch.scores, batch.rows = self._retrieve(docs, spans, todo, len(texts), search_depth(k), hidden,
                                                                   batch.within)
        for i, row in batch.decided.items():
            batch.rows[i, 0], batch.scores[i, 0] = row, DECIDED_SCORE
        for rule in self.rules.values():
            rule(batch)
        batch.finish()
        scores, rows = batch.scores, batch.rows
        for i in wordless:  # whitespace / punctuation only: nothing to link
            scores[i], rows[i] = 0.0, -1
        span = None if span_probs is None else np.asarray([p for doc_probs in span_probs for p in doc_probs], np.float32)
        features = nil_features(scores, rows, batch.by_rule(), batch.labels, self.index, self.nil.label_types,
                                texts if getattr(self.nil, "lexical", False) else None, span)
        confidence = np.where(rows[:, :1] < 0, 0.0, np.asarray(self.nil(features), np.float32)[:, None])[:, 0]  # no candidate: 0
        return per_doc(spans, k, scores, rows, confidence, features)

    def _retrieve(self, docs: Sequence[Doc], spans: Sequence[list], todo: np.ndarray, n: int, k: int,
                  hidden: Optional[list], within: Dict[int, Any]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Vectors and top-k (scores, rows) ``[n, ...]`` where only the mentions ``todo`` (flat
        indices) are encoded and searched (``within``: a mention's own searcher); the other rows hold zeros / -1."""
        vectors = np.zeros((n, self.encoder.dim), np.float32)
        scores, rows = np.zeros((n, k), np.float32), np.full((n, k), -1, np.int64)
        if len(todo) == 0:
            return vectors, scores, rows
        flat = spans_at(spans, todo.tolist())
        vectors[todo] = self.vectors(self.encoder, docs, flat, self.cfg.batch_size, hidden)
        found_scores, found_rows = self.index.search_each(vectors[todo], k, [within.get(i) for i in todo.tolist()])
        width = found_rows.shape[1]
        scores[todo, :width], rows[todo, :width] = found_scores, found_rows
        return vectors, scores, rows

    def mention_vectors(self, docs: Sequence[Doc], spans: Sequence[list]) -> np.ndarray:
        """The vectors of the given spans (per doc ``(start, end, label)``), by the vector strategy."""
        self.ensure_loaded()
        return self.vectors(self.encoder, docs, spans, self.cfg.batch_size, None)

    def decide(self, rows: np.ndarray, confidence: float) -> str:
        """A mention's id from its candidate rows and NIL confidence (``nil_label`` below the threshold)."""
        if rows.size == 0 or rows[0] < 0:
            return self.cfg.nil_label
        if self.cfg.threshold is not None and confidence < self.cfg.threshold:
            return self.cfg.nil_label
        return self.index.entities.ids[rows[0]]

    def set_annotations(self, docs: Sequence[Doc], predictions, target: Optional[DocSpans] = None) -> None:
        """Write the linked spans where the mention source says (or where ``target`` says)."""
        entities, target = self.index.entities, target or self.mentions
        # each candidate entity's [id, name] looked up once a batch (the table decodes them on demand)
        found = np.unique(np.concatenate([linked.rows.ravel() for _, linked in predictions] or [np.zeros(0, np.int64)]))
        named = {j: (entities.ids[j], entities.names[j]) for j in found[found >= 0].tolist()}
        for doc, (spans, linked) in zip(docs, predictions):
            scores, rows = linked.scores, linked.rows
            new = []
            for (a, b, label), r, c in zip(spans, rows, linked.confidence):
                kb_id = self.decide(r, c)
                if target.label_from_kb and not label:  # found spans: a label from their entity's KB types
                    types = entities.types[r[0]] if r[0] >= 0 else []  # NIL too: a label must not hang on the threshold
                    label = target.label_for(types)
                new.append(Span(doc, a, b, label=label, kb_id=kb_id))
            if target.write(doc, new):  # set on the final spans (:mod:`.span_data`: by offsets and label)
                attach(target.spans(doc), new, scores, rows, linked.confidence, named)

    def __call__(self, doc: Doc) -> Optional[Doc]:  # None: failed, and the error handler let it go (as spaCy's)
        return doc if link_batch(self, [doc]) else None

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        for docs in minibatch(stream, size=batch_size):
            if link_batch(self, docs):
                yield from docs

    def score(self, examples: Iterable[Example], **kwargs) -> Dict[str, object]:
        """Scores for ``nlp.evaluate`` / ``spacy evaluate``, on gold mentions with ``use_gold_ents`` (:mod:`.scoring`)."""
        return score_linker(self, examples, **kwargs)

    # ------------------------------------------------------------------ training (:mod:`.updating`)
    @property
    def is_trainable(self) -> bool:
        return True

    @property
    def model(self) -> Optional[BiEncoder]:  # spaCy's loop calls finish_update when it is not None
        return self.encoder

    def update(self, examples: Iterable[Example], *, drop: float = 0.0, sgd=None, losses: Optional[Dict[str, float]] = None) -> Dict[str, float]:
        """Learn from the batch's gold mentions (or matching predicted ones); ``drop`` is not used."""
        return self.updater.update(self, examples, sgd=sgd, losses=losses)

    def get_loss(self, examples: Iterable[Example], vectors) -> Tuple[float, Any]:  # (loss, d_loss/d_vectors)
        return self.updater.get_loss(self, examples, vectors)

    def finish_update(self, sgd) -> None:
        self.updater.finish_update(sgd)
