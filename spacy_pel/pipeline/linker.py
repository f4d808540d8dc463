"""The ``pel_linker`` pipeline component: bi-encoder retrieval over a FAISS entity index.

For every entity span (``doc.ents``, or the span group ``spans_key``) it encodes the mention in
context, retrieves the ``top_k`` nearest entities, sets the span's ``kb_id_`` to the best one — or to
``nil_label`` when the best score is below ``threshold`` — and keeps the candidates as
``span._.pel_candidates``: a list of ``[id, name, score]``, best first.

Resources (encoder + KB) are loaded lazily from the config paths, by ``initialize(kb_path=…)``, or
from the pipeline folder by ``from_disk``: a saved pipeline carries its encoder weights and KB and
never reaches for the network.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import spacy
import srsly
import torch
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.scorer import Scorer
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.util import minibatch
from spacy.vocab import Vocab

from ..corpora import NIL
from ..models.doc_encoder import encode_docs, enumerate_doc_spans, span_link_vectors
from ..models.encoder import BiEncoder, Mention
from ..models.span_scorer import (
    SpanScorer,
    greedy_non_overlapping,
    load_span_scorer,
    save_span_scorer,
)
from ..retrieval.index import EntityIndex
from .abbreviations import short_form_links
from .aliases import AliasTable, read_aliases, write_aliases

CANDIDATES_ATTR = "pel_candidates"

if not Span.has_extension(CANDIDATES_ATTR):
    Span.set_extension(CANDIDATES_ATTR, default=None)


@Language.factory(
    "pel_linker",
    default_config={
        "kb": None,
        "encoder": None,
        "top_k": 10,
        "threshold": None,
        "nil_label": NIL,
        "batch_size": 64,
        "context_window": 128,
        "device": "auto",
        "spans_key": None,
        "collective": False,
        "find_spans": False,
        "span_scorer": None,
        "span_threshold": 0.5,
        "max_span_len": 10,
        "alias_match": False,
        "aliases": None,
        "resolve_abbreviations": False,
    },
    assigns=["doc.ents", "token.ent_kb_id", f"span._.{CANDIDATES_ATTR}"],
    requires=["doc.ents"],
    default_score_weights={"nel_micro_f": 1.0, "nel_micro_p": None, "nel_micro_r": None},
)
def make_pel_linker(
    nlp: Language,
    name: str,
    kb: Optional[str],
    encoder: Optional[str],
    top_k: int,
    threshold: Optional[float],
    nil_label: str,
    batch_size: int,
    context_window: int,
    device: str,
    spans_key: Optional[str],
    collective: bool,
    find_spans: bool,
    span_scorer: Optional[str],
    span_threshold: Optional[float],
    max_span_len: int,
    alias_match: bool,
    aliases: Optional[str],
    resolve_abbreviations: bool,
) -> "PELLinker":
    """Create a ``pel_linker``.

    kb: KB folder written by ``python -m spacy_pel.build_kb`` (loaded on first use).
    encoder: encoder folder or name; default: the one recorded in the KB (must match its fingerprint).
    top_k: candidates kept on each span. threshold: best score below it → ``nil_label`` (None: never).
    batch_size: mentions per forward pass. context_window: word pieces of mention input.
    spans_key: link ``doc.spans[spans_key]`` instead of ``doc.ents``.
    collective: encode each document once (≤512-piece windows) and take every span's vector from
    that pass, instead of one marked-up input per mention (faster with many mentions per doc).
    find_spans: end-to-end — find the mentions with the span scorer (``span_scorer``: a file from
    ``spacy_pel.train_spans`` or ``spacy_pel.train_e2e``; kept if above ``span_threshold`` — None:
    the γ in the ``span_report.json`` beside the scorer file —, ≤ ``max_span_len`` tokens) and
    replace ``doc.ents`` with them, linked from the same document pass; no NER needed.
    alias_match: a mention whose text (normalised) is a KB name or synonym, or a surface form in
    ``aliases`` (a JSON file from ``python -m spacy_pel.aliases``), is linked among those entities
    (most frequent in annotated text, then best bi-encoder score); see :mod:`spacy_pel.aliases`.
    resolve_abbreviations: a mention that is a short form defined in its document (``long form (SF)``,
    :mod:`spacy_pel.abbreviations`) takes the candidates of a mention of the long form in the same
    document, or else is looked up in the alias table by its long form.
    """
    return PELLinker(
        nlp.vocab,
        name,
        kb=kb,
        encoder=encoder,
        top_k=top_k,
        threshold=threshold,
        nil_label=nil_label,
        batch_size=batch_size,
        context_window=context_window,
        device=device,
        spans_key=spans_key,
        collective=collective,
        find_spans=find_spans,
        span_scorer=span_scorer,
        span_threshold=span_threshold,
        max_span_len=max_span_len,
        alias_match=alias_match,
        aliases=aliases,
        resolve_abbreviations=resolve_abbreviations,
    )


def find_linker(nlp: Language) -> Tuple[str, "PELLinker"]:
    """The (name, component) of the pipeline's pel_linker."""
    for name, proc in nlp.pipeline:
        if isinstance(proc, PELLinker):
            return name, proc
    raise ValueError("the pipeline has no pel_linker")


def load_pipeline(pipeline=None, kb=None, encoder: Optional[str] = None) -> Tuple[Language, "PELLinker"]:
    """A saved pipeline (``spacy.load``), or a blank English one linking against a KB folder."""
    if pipeline is not None:
        nlp = spacy.load(pipeline)
        return nlp, find_linker(nlp)[1]
    if kb is None:
        raise ValueError("give a saved pipeline or a KB folder")
    nlp = spacy.blank("en")
    return nlp, nlp.add_pipe("pel_linker", config={"kb": str(kb), "encoder": encoder})


class PELLinker(Pipe):
    def __init__(
        self,
        vocab: Vocab,
        name: str = "pel_linker",
        *,
        kb: Optional[str] = None,
        encoder: Optional[str] = None,
        top_k: int = 10,
        threshold: Optional[float] = None,
        nil_label: str = NIL,
        batch_size: int = 64,
        context_window: int = 128,
        device: str = "auto",
        spans_key: Optional[str] = None,
        collective: bool = False,
        find_spans: bool = False,
        span_scorer: Optional[str] = None,
        span_threshold: Optional[float] = 0.5,
        max_span_len: int = 10,
        alias_match: bool = False,
        aliases: Optional[str] = None,
        resolve_abbreviations: bool = False,
    ):
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        self.vocab, self.name = vocab, name
        self.kb_path, self.encoder_name = kb, encoder
        self.top_k, self.threshold, self.nil_label = top_k, threshold, nil_label
        self.batch_size, self.context_window, self.device = batch_size, context_window, device
        self.spans_key, self.collective = spans_key, collective
        self.find_spans, self.span_threshold, self.max_span_len = find_spans, span_threshold, max_span_len
        self.span_scorer_path = span_scorer
        self.span_scorer: Optional[SpanScorer] = None
        self.encoder: Optional[BiEncoder] = None
        self.index: Optional[EntityIndex] = None
        self.alias_match, self.aliases_path = alias_match, aliases
        self.resolve_abbreviations = resolve_abbreviations
        self.alias_counts: Optional[dict] = None  # read from `aliases` on first use, or from the pipeline folder
        self.alias_table = None  # spacy_pel.aliases.AliasTable when alias_match

    # ------------------------------------------------------------------ resources
    def set_resources(self, encoder: BiEncoder, index: EntityIndex) -> None:
        """Use an in-memory encoder and KB (refused if the KB was built with another encoder)."""
        index.check_encoder(encoder)
        encoder.config.mention_max_length = self.context_window
        self.encoder, self.index = encoder.to_device(self.device), index
        if self.alias_match and self.alias_counts is None and self.aliases_path:
            self.alias_counts = read_aliases(self.aliases_path)
        self.alias_table = AliasTable(index, self.alias_counts) if self.alias_match else None
        if self.span_scorer is None and self.span_scorer_path:
            self.span_scorer = load_span_scorer(self.span_scorer_path, device=str(self.encoder.device_))
            if self.span_threshold is None:  # the γ chosen when the scorer was trained, if recorded
                report = Path(self.span_scorer_path).parent / "span_report.json"
                self.span_threshold = float(srsly.read_json(report)["threshold"]) if report.exists() else 0.5

    def load_resources(self, kb: str, encoder: Optional[str] = None) -> None:
        index = EntityIndex.from_disk(kb)
        source = encoder or index.encoder_source
        if not source:
            raise ValueError(f"{kb} records no encoder; set the component's `encoder`")
        self.set_resources(BiEncoder.from_pretrained(source), index)

    def _ready(self) -> None:
        if self.index is None:
            if not self.kb_path:
                raise ValueError(
                    f"{self.name} has no KB: set config {{'kb': KB_DIR}} or call initialize(kb_path=KB_DIR)"
                )
            self.load_resources(self.kb_path, self.encoder_name)

    def initialize(
        self,
        get_examples: Optional[Callable[[], Iterable[Example]]] = None,
        *,
        nlp: Optional[Language] = None,
        kb_path: Optional[str] = None,
        encoder: Optional[str] = None,
    ) -> None:
        """Load the KB (``kb_path`` or the config's ``kb``) and its encoder."""
        self.kb_path = kb_path or self.kb_path
        self.encoder_name = encoder or self.encoder_name
        self.index = None
        self._ready()

    # ------------------------------------------------------------------ linking
    def _spans(self, doc: Doc) -> Sequence[Span]:
        if self.spans_key is None:
            return doc.ents
        return doc.spans[self.spans_key] if self.spans_key in doc.spans else []

    def predict(self, docs: Sequence[Doc], k: Optional[int] = None) -> List[Tuple[list, np.ndarray, np.ndarray]]:
        """Per doc: ([(start, end, label)], scores, rows) — the spans linked and their top-k
        (scores, KB rows) arrays, best first; rows -1 = no entity. With ``find_spans`` the spans are
        the enumerator's, else the doc's own."""
        self._ready()
        k = k or self.top_k
        if self.find_spans:
            spans, vectors = self.found_spans(docs)
        else:
            spans = [[(s.start, s.end, s.label) for s in self._spans(d)] for d in docs]
            vectors = self.span_vectors(docs, spans)
        scores, rows = self.index.search(vectors, k)
        if self.alias_table is not None or self.resolve_abbreviations:
            texts = [d[a:b].text for d, sp in zip(docs, spans) for a, b, _ in sp]
            lookup, copy_from = short_form_links(docs, spans, texts) if self.resolve_abbreviations else (texts, {})
            if self.alias_table is not None:
                scores, rows = self.alias_table.restrict(lookup, vectors, scores, rows)
            for i, j in copy_from.items():
                scores[i], rows[i] = scores[j], rows[j]
        out, start = [], 0
        for doc_spans in spans:
            n = len(doc_spans)
            out.append((doc_spans, scores[start : start + n], rows[start : start + n]))
            start += n
        return out

    def span_vectors(self, docs: Sequence[Doc], spans: Sequence[list]) -> np.ndarray:
        """Mention vectors: one marked-up input per mention, or (collective) one pass per doc."""
        if not self.collective:
            mentions = [Mention(d.text, d[a].idx, d[b - 1].idx + len(d[b - 1])) for d, sp in zip(docs, spans) for a, b, _ in sp]
            return self.encoder.encode_mentions(mentions, batch_size=self.batch_size)
        busy = [(d, sp) for d, sp in zip(docs, spans) if sp]
        if not busy:
            return np.zeros((0, self.encoder.dim), np.float32)
        hidden = encode_docs(self.encoder, [d for d, _ in busy], batch_size=max(1, self.batch_size // 8))
        with torch.inference_mode():
            return np.concatenate(
                [
                    span_link_vectors(self.encoder, H, [a for a, _, _ in sp], [b for _, b, _ in sp]).cpu().numpy()
                    for (_, sp), H in zip(busy, hidden)
                ]
            )

    def found_spans(self, docs: Sequence[Doc]) -> Tuple[List[list], np.ndarray]:
        """End-to-end: score every span of ≤ ``max_span_len`` tokens, keep those above
        ``span_threshold`` (greedy by score, no overlaps) and take their vectors from the same pass."""
        if self.span_scorer is None:
            raise ValueError(f"{self.name}: find_spans needs a span scorer (train one with spacy_pel.train_spans)")
        hidden = encode_docs(self.encoder, docs, batch_size=max(1, self.batch_size // 8))
        spans, vectors = [], []
        with torch.inference_mode():
            for doc, H in zip(docs, hidden):
                starts, ends = enumerate_doc_spans(doc, self.max_span_len)
                if len(starts) == 0:
                    spans.append([])
                    continue
                probs = self.span_scorer.probs(H, starts, ends).cpu().numpy()
                keep = np.flatnonzero(probs > self.span_threshold)
                chosen = [keep[i] for i in greedy_non_overlapping(starts[keep], ends[keep], probs[keep])]
                spans.append([(int(starts[i]), int(ends[i]), 0) for i in chosen])
                if chosen:
                    vectors.append(span_link_vectors(self.encoder, H, starts[chosen], ends[chosen]).cpu().numpy())
        return spans, np.concatenate(vectors) if vectors else np.zeros((0, self.encoder.dim), np.float32)

    def decide(self, scores: np.ndarray, rows: np.ndarray) -> str:
        if rows.size == 0 or rows[0] < 0:
            return self.nil_label
        if self.threshold is not None and scores[0] < self.threshold:
            return self.nil_label
        return self.index.entities[rows[0]].id

    def set_annotations(self, docs: Sequence[Doc], predictions) -> None:
        entities = self.index.entities
        for doc, (spans, scores, rows) in zip(docs, predictions):
            if not spans and not (self.find_spans and len(doc.ents)):
                continue
            new = []
            for (a, b, label), s, r in zip(spans, scores, rows):
                kb_id = self.decide(s, r)
                if self.find_spans and not label:  # found spans: labelled with their entity's first KB type
                    types = entities[r[0]].types if kb_id != self.nil_label and r[0] >= 0 else []
                    label = types[0] if types else "ENTITY"
                new.append(Span(doc, a, b, label=label, kb_id=kb_id))
            if self.spans_key is None:
                doc.ents = new  # fresh Span objects: setting kb_id_ on doc.ents' copies would not stick
            else:
                doc.spans[self.spans_key] = new
            # span extensions are keyed by (offsets, label, kb_id): set them on the final spans
            for span, s, r in zip(self._spans(doc), scores, rows):
                span._.set(
                    CANDIDATES_ATTR,
                    [[entities[j].id, entities[j].name, round(float(x), 5)] for x, j in zip(s, r) if j >= 0],
                )

    def __call__(self, doc: Doc) -> Doc:
        self.set_annotations([doc], self.predict([doc]))
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        for docs in minibatch(stream, size=batch_size):
            self.set_annotations(docs, self.predict(docs))
            yield from docs

    def score(self, examples: Iterable[Example], **kwargs) -> Dict[str, object]:
        return Scorer.score_links(examples, negative_labels=[self.nil_label], **kwargs)

    # ------------------------------------------------------------------ serialisation
    def _cfg(self) -> dict:
        return {
            "top_k": self.top_k,
            "threshold": self.threshold,
            "nil_label": self.nil_label,
            "batch_size": self.batch_size,
            "context_window": self.context_window,
            "spans_key": self.spans_key,
            "collective": self.collective,
            "find_spans": self.find_spans,
            "span_threshold": self.span_threshold,
            "max_span_len": self.max_span_len,
            "alias_match": self.alias_match,
            "resolve_abbreviations": self.resolve_abbreviations,
        }

    def to_disk(self, path, *, exclude=tuple()) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        srsly.write_json(path / "cfg.json", self._cfg())
        if self.index is not None or self.kb_path:
            self._ready()
            self.encoder.save(path / "encoder")
            self.index.to_disk(path / "kb")
            if self.span_scorer is not None:
                save_span_scorer(self.span_scorer, path / "span_scorer.safetensors")
        if self.alias_counts is not None:
            write_aliases(self.alias_counts, path / "aliases.json")

    def from_disk(self, path, *, exclude=tuple()) -> "PELLinker":
        path = Path(path)
        cfg = srsly.read_json(path / "cfg.json")
        for key, value in cfg.items():
            setattr(self, key, value)
        if (path / "aliases.json").exists():
            self.alias_counts = read_aliases(path / "aliases.json")
        if (path / "span_scorer.safetensors").exists():
            self.span_scorer = load_span_scorer(path / "span_scorer.safetensors")
        if (path / "kb").exists():
            self.set_resources(BiEncoder.from_pretrained(path / "encoder"), EntityIndex.from_disk(path / "kb"))
        return self

    def to_bytes(self, *, exclude=tuple()) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            self.to_disk(tmp, exclude=exclude)
            root = Path(tmp)
            files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
        return srsly.msgpack_dumps(files)

    def from_bytes(self, bytes_data: bytes, *, exclude=tuple()) -> "PELLinker":
        files = srsly.msgpack_loads(bytes_data)
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in files.items():
                target = Path(tmp) / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            self.from_disk(tmp, exclude=exclude)
        return self
