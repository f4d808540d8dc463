"""The span scorer of the end-to-end model (SPEC §2) and span selection.

``p(m | (i, j)) = σ(w_sᵀh_i + w_eᵀh_j + Σ_{q=i..j} w_mᵀh_q)`` over the token vectors of one document
pass (:mod:`spacy_pel.models.doc_encoder`); :func:`select_spans` keeps the spans above a threshold,
overlaps resolved greedily by score — the one rule the linker and both trainers use.

``kind = "bio"`` is the token-tagging alternative on the same pass: a head tags each token O, B or I
(``softmax(W_t h_q)``) and a span's probability is that of its tags, ``P(B_i) Π_{q=i+1..j} P(I_q)
(1 − P(I_{j+1}))``, so :func:`select_spans`, γ and the linker treat both kinds alike.

Whitespace tokens (a newline, a double space: no word pieces, zero vectors) are absent to both kinds:
no span starts or ends on one (:func:`.doc_encoder.enumerate_doc_spans`), one inside a span adds
nothing, and ``j+1`` is the next token with word pieces — a newline between words changes no span's
probability.

A scorer trained with span labels (``labels``: the corpus's, e.g. Chemical and Disease) also has a
label head, ``softmax(W [h_i; h_j; mean(h_i..h_j)] + b)``, that names each found span's type.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional, Sequence, Union

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ..files import atomic_write
from .doc_encoder import POOLINGS, as_index, blank_tokens, check_spans, prefix_sum, span_means

PathLike = Union[str, Path]
SPAN_SCORER_FORMAT = "spacy_pel.SpanScorer"
SPAN_SCORER_VERSION = 2  # 2: optional label head and kind (version 1 files: "span", no labels)
KINDS = ("span", "bio")
SCORER_FILE = "span_scorer.safetensors"  # a span scorer's weights inside a model folder (train_e2e, train_spans, a pipeline)
O_TAG, B_TAG, I_TAG = 0, 1, 2
IGNORED_TAG = -100  # a tag training does not learn (torch's cross-entropy ignore_index)


class SpanScorer(torch.nn.Module):
    """``logit(i, j) = w_sᵀh_i + w_eᵀh_j + Σ_{q=i..j} w_mᵀh_q + b`` with ``j = end - 1``.

    The single bias ``b`` lives on ``w_s``; ``w_e`` and ``w_m`` have none. With ``labels``, a label
    head ``w_label`` scores each span's label from its start, end and mean token vectors.
    """

    def __init__(self, hidden_size: int, labels: Sequence[str] = (), kind: str = "span", pooling: str = "mean"):
        super().__init__()
        if hidden_size < 1:
            raise ValueError(f"hidden_size must be positive, not {hidden_size}")
        if kind not in KINDS:
            raise ValueError(f"span scorer kind must be one of {KINDS}, not {kind!r}")
        if pooling not in POOLINGS:
            raise ValueError(f"span scorer token pooling must be one of {POOLINGS}, not {pooling!r}")
        self.pooling = pooling  # how its token vectors are made from word pieces (encode_docs)
        labels = list(labels)
        if len(set(labels)) != len(labels) or not all(isinstance(x, str) and x for x in labels):
            raise ValueError(f"span labels must be distinct non-empty strings, not {labels!r}")
        self.hidden_size = int(hidden_size)
        self.labels: List[str] = labels
        self.kind = kind
        if kind == "span":
            self.w_s = torch.nn.Linear(hidden_size, 1)
            self.w_e = torch.nn.Linear(hidden_size, 1, bias=False)
            self.w_m = torch.nn.Linear(hidden_size, 1, bias=False)
        else:
            self.w_tag = torch.nn.Linear(hidden_size, 3)
        self.w_label: Optional[torch.nn.Linear] = torch.nn.Linear(3 * hidden_size, len(labels)) if labels else None

    def forward(self, H: torch.Tensor, starts, ends) -> torch.Tensor:
        """Span logits ``[S]`` for the token vectors ``H [n, hidden]`` and spans ``[start, end)``."""
        st, en = as_index(starts, H.device), as_index(ends, H.device)
        check_spans(H.shape[0], st, en)
        if self.kind == "bio":
            return self._bio_logits(H, st, en)
        s = self.w_s(H).squeeze(-1)
        e = self.w_e(H).squeeze(-1)
        m = prefix_sum(self.w_m(H).squeeze(-1))
        inside = (m[en] - m[st]).to(s.dtype)
        return s[st] + e[en - 1] + inside

    def tag_logits(self, H: torch.Tensor) -> torch.Tensor:
        """O/B/I logits ``[n, 3]`` of every token (``kind = "bio"`` only)."""
        return self.w_tag(H.to(self.w_tag.weight.dtype))

    def _bio_logits(self, H: torch.Tensor, st: torch.Tensor, en: torch.Tensor) -> torch.Tensor:
        """log-odds of ``P(B_i) Π P(I_q) (1 − P(I_{j+1}))`` for the spans ``[st, en)``. Tokens without
        word pieces (whitespace, :func:`.doc_encoder.blank_tokens`) are not there: none counts among
        the ``I_q``, and ``j+1`` is the next token that has pieces."""
        logp = torch.log_softmax(self.tag_logits(H).float(), dim=-1)
        blank = blank_tokens(H)
        inside = prefix_sum(logp[:, I_TAG].masked_fill(blank, 0.0))
        after = torch.cat([torch.log1p(-logp[:, I_TAG].exp().clamp(max=1 - 1e-6)), logp.new_zeros(1)])  # j+1 = n: nothing after
        log_span = logp[st, B_TAG] + (inside[en] - inside[st + 1]).float() + after[next_seen(blank)[en]]
        log_span = log_span.clamp(max=-1e-6)
        return log_span - torch.log1p(-log_span.exp())

    def probs(self, H: torch.Tensor, starts, ends) -> torch.Tensor:
        """``p(m | (i, j)) = σ(logit)``."""
        return torch.sigmoid(self.forward(H, starts, ends))

    def label_logits(self, H: torch.Tensor, starts, ends) -> torch.Tensor:
        """Label logits ``[S, len(labels)]`` of the spans (a scorer without labels refuses)."""
        if self.w_label is None:
            raise ValueError("this span scorer was trained without span labels")
        st, en = as_index(starts, H.device), as_index(ends, H.device)
        x = torch.cat([H[st], H[en - 1], span_means(H, st, en)], dim=-1)
        return self.w_label(x.to(self.w_label.weight.dtype))

    def predict_labels(self, H: torch.Tensor, starts, ends) -> List[str]:
        """The most probable label of each span."""
        if len(as_index(starts, H.device)) == 0:
            return []
        best = self.label_logits(H, starts, ends).argmax(-1).tolist()
        return [self.labels[i] for i in best]


def next_seen(blank: torch.Tensor) -> torch.Tensor:
    """``[n + 1]``: for each position ``p`` of ``n`` tokens (and ``n``), the first token at or after
    ``p`` that is not ``blank`` (``n`` if none)."""
    n = len(blank)
    position = torch.arange(n + 1, device=blank.device)
    seen = torch.where(torch.cat([~blank, blank.new_ones(1)]), position, n)
    return torch.flip(torch.cummin(torch.flip(seen, [0]), 0).values, [0])


def bio_tags(n_tokens: int, spans) -> np.ndarray:
    """O/B/I tags of ``n_tokens`` tokens for the ``(start, end)`` spans; a span overlapping an
    earlier (by start) one is left out."""
    tags = np.full(n_tokens, O_TAG, dtype=np.int64)
    for start, end in sorted(spans):
        if start < end and (tags[start:end] == O_TAG).all():
            tags[start], tags[start + 1 : end] = B_TAG, I_TAG
    return tags


def bio_targets(tags: np.ndarray, H: torch.Tensor) -> torch.Tensor:
    """A document's tags (:func:`bio_tags`) as training targets on ``H``'s device, those of tokens
    without word pieces (:func:`.doc_encoder.blank_tokens`) ignored (``-100``, cross-entropy's
    ``ignore_index``): no span probability reads them."""
    targets = torch.from_numpy(np.asarray(tags, dtype=np.int64)).to(H.device)
    return targets.masked_fill(blank_tokens(H), IGNORED_TAG)


def greedy_non_overlapping(starts, ends, scores) -> List[int]:
    """Indices of the spans kept greedily by descending score, skipping any span that overlaps an
    already kept one. Ties go to the earlier index; the result is in document order (start, end).
    """
    st = np.asarray(starts, dtype=np.int64)
    en = np.asarray(ends, dtype=np.int64)
    sc = scores.detach().float().cpu().numpy() if isinstance(scores, torch.Tensor) else np.asarray(scores)
    if not (len(st) == len(en) == len(sc)):
        raise ValueError("starts, ends and scores must have the same length")
    if len(st) == 0:
        return []
    taken = np.zeros(int(en.max()), dtype=bool)
    kept: List[int] = []
    for k in np.argsort(-sc, kind="stable"):
        if not taken[st[k] : en[k]].any():
            taken[st[k] : en[k]] = True
            kept.append(int(k))
    kept.sort(key=lambda k: (int(st[k]), int(en[k])))
    return kept


def select_spans(starts, ends, probs, threshold: float) -> np.ndarray:
    """Indices (into ``starts``/``ends``/``probs``) of the spans with probability above ``threshold``,
    overlaps resolved by :func:`greedy_non_overlapping`; in document order."""
    probs = probs.detach().float().cpu().numpy() if isinstance(probs, torch.Tensor) else np.asarray(probs)
    keep = np.flatnonzero(probs > threshold)
    if len(keep) == 0:
        return keep
    chosen = greedy_non_overlapping(np.asarray(starts)[keep], np.asarray(ends)[keep], probs[keep])
    return keep[chosen]


# ---------------------------------------------------------------------------- saving
def _meta_path(path: Path) -> Path:
    return path.with_suffix(".json")


def save_span_scorer(scorer: SpanScorer, path: PathLike) -> None:
    """Write ``path`` (safetensors weights) and ``path`` with suffix ``.json`` (hidden size)."""
    path = Path(path)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in scorer.state_dict().items()}
    meta = {"format": SPAN_SCORER_FORMAT, "version": SPAN_SCORER_VERSION, "hidden_size": scorer.hidden_size,
            "labels": scorer.labels, "kind": scorer.kind, "pooling": scorer.pooling}
    atomic_write(path, lambda tmp: save_file(tensors, str(tmp)))
    atomic_write(_meta_path(path), lambda tmp: tmp.write_text(json.dumps(meta, indent=2), encoding="utf8"))


def load_span_scorer(path: PathLike, device: str = "cpu") -> SpanScorer:
    """Read a :class:`SpanScorer` written by :func:`save_span_scorer`."""
    path = Path(path)
    meta_path = _meta_path(path)
    for p in (path, meta_path):
        if not p.exists():
            raise FileNotFoundError(f"span scorer file missing: {p}")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf8"))
        hidden = int(meta["hidden_size"])
        labels, kind = list(meta.get("labels", [])), str(meta.get("kind", "span"))
        pooling = str(meta.get("pooling", "mean"))
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{meta_path}: not a span scorer description ({err})") from err
    if meta.get("format") != SPAN_SCORER_FORMAT:
        raise ValueError(f"{meta_path}: format is {meta.get('format')!r}, expected {SPAN_SCORER_FORMAT!r}")
    scorer = SpanScorer(hidden, labels, kind, pooling)
    try:
        scorer.load_state_dict(load_file(str(path), device=device))
    except RuntimeError as err:
        raise ValueError(f"{path}: weights do not fit a span scorer of hidden size {hidden} ({err})") from err
    return scorer.to(device)
