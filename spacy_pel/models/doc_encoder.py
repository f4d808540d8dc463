"""One-pass document encoding and end-to-end span scoring (SPEC section 2, collective dual encoder).

A document is tokenised once into word pieces, cut into overlapping windows of at most
``max_pieces`` pieces (``[CLS] window [SEP]`` fits BERT's 512 positions), and every window goes
through the mention transformer once, batched across documents. Each piece keeps the hidden state
from the window in which it has the most context on both sides; each spaCy token is the mean of its
pieces. From these token vectors ``H``:

* :func:`enumerate_spans` lists every span of at most ``L`` tokens,
* :class:`SpanScorer` gives ``p(m|(i,j)) = σ(w_sᵀh_i + w_eᵀh_j + Σ_{q=i..j} w_mᵀh_q)``,
* :func:`greedy_non_overlapping` keeps the best non-overlapping spans,
* :func:`span_means` (and :func:`span_link_vectors`, normalised like the encoder's mention
  vectors) give each kept span's vector for linking.

Linking N mentions of a document therefore costs one pass over the document, not N passes.
A trained :class:`SpanScorer` is saved as ``NAME.safetensors`` plus ``NAME.json`` (hidden size).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..corpora import PASSAGES_KEY
from .encoder import BiEncoder

PathLike = Union[str, Path]
MAX_PIECES = 510  # word pieces per window; + [CLS] and [SEP] = BERT's 512 positions
MAX_SPAN_LEN = 10  # SPEC's L


# ---------------------------------------------------------------------------- word pieces
def _token_piece_ranges(offsets: np.ndarray, doc) -> np.ndarray:
    """[start, end) word-piece range of each spaCy token, from the pieces' character offsets.

    A piece belongs to every token its characters overlap (a piece may straddle two spaCy tokens,
    e.g. ``don`` for ``do`` + ``n't``). A token overlapping no piece gets the empty range at the
    position where its pieces would be.
    """
    n = len(doc)
    out = np.zeros((n, 2), dtype=np.int64)
    if n == 0:
        return out
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    tok_start = np.fromiter((t.idx for t in doc), dtype=np.int64, count=n)
    tok_end = tok_start + np.fromiter((len(t.text) for t in doc), dtype=np.int64, count=n)
    # first piece ending after the token starts, first piece starting at or after the token ends
    lo = np.searchsorted(offsets[:, 1], tok_start, side="right")
    hi = np.searchsorted(offsets[:, 0], tok_end, side="left")
    out[:, 0] = np.minimum(lo, hi)
    out[:, 1] = hi
    return out


def align_wordpieces(tokenizer, doc) -> Tuple[List[int], np.ndarray]:
    """Tokenise ``doc.text`` once; return the piece ids and each token's [start, end) piece range.

    No special tokens are added. ``token_pieces`` has shape ``[len(doc), 2]``; a token with no word
    piece (whitespace, or characters the tokenizer drops) has an empty range ``(k, k)``.
    """
    enc = tokenizer(doc.text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    return list(enc["input_ids"]), _token_piece_ranges(enc["offset_mapping"], doc)


def chunk_windows(
    n_pieces: int, max_pieces: int = MAX_PIECES, stride: Optional[int] = None
) -> Tuple[List[Tuple[int, int]], np.ndarray]:
    """Overlapping windows ``[start, end)`` covering ``n_pieces`` pieces, and each piece's owner.

    Windows start every ``stride`` pieces (default ``max_pieces // 2``); the last one is aligned to
    the end of the document so every window is full. ``owner[p]`` is the window in which piece ``p``
    has the most context, i.e. maximising ``min(p - start, end - 1 - p)`` (ties: earlier window).
    A document that fits gives the single window ``(0, n_pieces)``; an empty one gives none.
    """
    if max_pieces < 1:
        raise ValueError(f"max_pieces must be positive, not {max_pieces}")
    stride = max_pieces // 2 if stride is None else stride
    if not 1 <= stride <= max_pieces:
        raise ValueError(f"stride must be in 1..max_pieces ({max_pieces}), not {stride}")
    if n_pieces < 0:
        raise ValueError(f"n_pieces must be >= 0, not {n_pieces}")
    if n_pieces == 0:
        return [], np.zeros(0, dtype=np.int64)
    if n_pieces <= max_pieces:
        return [(0, n_pieces)], np.zeros(n_pieces, dtype=np.int64)
    last = n_pieces - max_pieces
    starts = list(range(0, last, stride)) + [last]
    windows = [(s, s + max_pieces) for s in starts]
    owner = np.zeros(n_pieces, dtype=np.int64)
    best = np.full(n_pieces, -1, dtype=np.int64)
    for w, (s, e) in enumerate(windows):
        p = np.arange(s, e)
        context = np.minimum(p - s, e - 1 - p)
        better = context > best[s:e]
        best[s:e][better] = context[better]
        owner[s:e][better] = w
    return windows, owner


def _max_window(encoder: BiEncoder, max_pieces: Optional[int]) -> int:
    """The window size: ``max_pieces`` or what the model's position table allows (at most 510)."""
    limit = int(getattr(encoder.mention_model.config, "max_position_embeddings", MAX_PIECES + 2)) - 2
    if max_pieces is None:
        return min(MAX_PIECES, limit)
    if not 1 <= max_pieces <= limit:
        raise ValueError(f"max_pieces must be in 1..{limit} for this model, not {max_pieces}")
    return max_pieces


POOLINGS = ("mean", "first")  # a token's vector: the mean of its word pieces, or its first piece


def _pool_tokens(pieces: torch.Tensor, token_pieces: np.ndarray, pooling: str = "mean") -> torch.Tensor:
    """Each token's vector from its pieces: their mean, or the first one (zero for a token without
    pieces); keeps the graph."""
    n_tokens, hidden = len(token_pieces), pieces.shape[-1]
    lengths = token_pieces[:, 1] - token_pieces[:, 0]
    if pooling == "first":
        if len(pieces) == 0:
            return torch.zeros((n_tokens, hidden), dtype=pieces.dtype, device=pieces.device)
        # a token without pieces has the empty range (k, k), k up to len(pieces): clamp, then zero it
        first = torch.from_numpy(np.minimum(token_pieces[:, 0], len(pieces) - 1)).to(pieces.device)
        has = torch.from_numpy(lengths > 0).to(device=pieces.device, dtype=pieces.dtype)
        return pieces[first] * has.unsqueeze(1)
    token_of = np.repeat(np.arange(n_tokens), lengths)
    piece_of = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    piece_of += np.repeat(token_pieces[:, 0], lengths)
    device = pieces.device
    summed = torch.zeros((n_tokens, hidden), dtype=pieces.dtype, device=device).index_add(
        0, torch.from_numpy(token_of).to(device), pieces[torch.from_numpy(piece_of).to(device)]
    )
    counts = torch.from_numpy(np.maximum(lengths, 1)).to(device=device, dtype=pieces.dtype)
    return summed / counts.unsqueeze(1)


def encode_docs(
    encoder: BiEncoder,
    docs: Sequence,
    batch_size: int = 8,
    grad: bool = False,
    max_pieces: Optional[int] = None,
    stride: Optional[int] = None,
    pooling: str = "mean",
) -> List[torch.Tensor]:
    """Contextual token vectors ``[len(doc), hidden]`` for each doc, from one pass of the mention model.

    Windows of all documents are length-sorted and run ``batch_size`` at a time with dynamic
    padding. With ``grad=False`` the model runs in eval mode under ``torch.inference_mode``, in the
    encoder's inference precision (bf16 autocast, or its int8 / ONNX copy: ``BiEncoder.runtime_model``); with ``grad=True`` the graph is kept and the model's train/eval
    mode is left to the caller. Vectors are float32 on ``encoder.device_`` and are *not* normalised
    (see :func:`span_link_vectors`). Tokens without word pieces get zero vectors. ``pooling``: a
    token's vector is the mean of its pieces' states, or its first piece's (what taggers use).
    """
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, not {batch_size}")
    window = _max_window(encoder, max_pieces)
    tok = encoder.tokenizer
    model = encoder.mention_model
    hidden = int(model.config.hidden_size)
    device = encoder.device_
    docs = list(docs)
    texts = [d.text for d in docs]
    enc = tok(texts, add_special_tokens=False, return_offsets_mapping=True, verbose=False) if texts else None
    plans = []  # per doc: (piece ranges, windows, owner)
    seqs: List[List[int]] = []
    for i, doc in enumerate(docs):
        ids = enc["input_ids"][i]
        ranges = _token_piece_ranges(enc["offset_mapping"][i], doc)
        windows, owner = chunk_windows(len(ids), window, stride)
        plans.append((ranges, windows, owner))
        for s, e in windows:
            seqs.append([tok.cls_token_id, *ids[s:e], tok.sep_token_id])

    was_training = model.training
    if not grad:
        model.eval()
    grad_mode = torch.inference_mode() if not grad else contextlib.nullcontext()
    precision = encoder._autocast() if not grad else contextlib.nullcontext()
    try:
        with grad_mode, precision:  # without a gradient: the tower copy the precision runs (int8, ONNX …)
            states = _run_windows(encoder.runtime_model(model), tok.pad_token_id, seqs, batch_size, device, window + 2)
        # outside inference mode, so the vectors are ordinary tensors (a span scorer trained on
        # frozen vectors needs to save them for backward)
        with torch.no_grad() if not grad else contextlib.nullcontext():
            return _stitch(plans, states, hidden, device, pooling)
    finally:
        model.train(was_training)


WIDTH_STEP = 64  # a window is padded to its own length rounded up to this, whatever it is batched with


def padded_widths(lengths: Sequence[int], cap: int) -> np.ndarray:
    """Each window's padded width: its length rounded up to :data:`WIDTH_STEP`, at most ``cap`` (the
    model's window, so a width never outgrows the position table)."""
    return np.minimum(-(-np.asarray(lengths, dtype=np.int64) // WIDTH_STEP) * WIDTH_STEP, cap)


def _batches(widths: np.ndarray, batch_size: int) -> List[np.ndarray]:
    """Windows grouped by padded width (:func:`padded_widths`), widest first, at most ``batch_size`` a batch: a window's padding never depends on its companions, so a document's
    vectors are the same whether it is linked alone or batched with others (at bf16 the padded width
    moves the rounding)."""
    order = np.argsort(-widths, kind="stable")
    out: List[np.ndarray] = []
    for width in dict.fromkeys(widths[order].tolist()):
        same = order[widths[order] == width]
        out += [same[b : b + batch_size] for b in range(0, len(same), batch_size)]
    return out


def _run_windows(model, pad_id: int, seqs: List[List[int]], batch_size: int, device, cap: int) -> List[torch.Tensor]:
    """Hidden states of each sequence's pieces (``[CLS]``/``[SEP]`` dropped), batched by padded width."""
    states: List[Optional[torch.Tensor]] = [None] * len(seqs)
    widths = padded_widths([len(x) for x in seqs], cap)
    for idx in _batches(widths, batch_size):
        width = int(widths[idx[0]])
        ids = torch.full((len(idx), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, j in enumerate(idx):
            ids[row, : len(seqs[j])] = torch.tensor(seqs[j], dtype=torch.long)
            mask[row, : len(seqs[j])] = 1
        out = model(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state.float()
        for row, j in enumerate(idx):
            states[j] = out[row, 1 : len(seqs[j]) - 1]
    return states  # type: ignore[return-value]


def _stitch(plans, states: List[torch.Tensor], hidden: int, device, pooling: str = "mean") -> List[torch.Tensor]:
    """Each piece's state from its owner window, then each token's mean over its pieces."""
    results: List[torch.Tensor] = []
    first = 0
    for ranges, windows, owner in plans:
        if not windows:
            results.append(torch.zeros((len(ranges), hidden), dtype=torch.float32, device=device))
            continue
        parts, where = [], []
        for w, (s, _) in enumerate(windows):
            mine = np.flatnonzero(owner == w)
            if len(mine):
                parts.append(states[first + w][torch.from_numpy(mine - s).to(device)])
                where.append(mine)
        first += len(windows)
        pieces = torch.cat(parts)
        position = np.concatenate(where)
        if not np.all(position[1:] > position[:-1]):
            pieces = pieces[torch.from_numpy(np.argsort(position, kind="stable")).to(device)]
        results.append(_pool_tokens(pieces, ranges, pooling))
    return results


# ---------------------------------------------------------------------------- spans
def enumerate_spans(n_tokens: int, max_len: int = MAX_SPAN_LEN) -> Tuple[np.ndarray, np.ndarray]:
    """Every span of 1..``max_len`` tokens of an ``n_tokens`` document: int64 ``starts``, exclusive ``ends``.

    Ordered by start, then by length; there are ``Σ_{l=1..min(L,n)} (n - l + 1)`` of them.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be positive, not {max_len}")
    if n_tokens <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    starts = np.repeat(np.arange(n_tokens, dtype=np.int64), max_len)
    ends = starts + np.tile(np.arange(1, max_len + 1, dtype=np.int64), n_tokens)
    keep = ends <= n_tokens
    return starts[keep], ends[keep]


def enumerate_doc_spans(
    doc, max_len: int = MAX_SPAN_LEN, skip_punct: bool = True, blank=None
) -> Tuple[np.ndarray, np.ndarray]:
    """Every span of 1..``max_len`` words of ``doc`` that starts and ends on a word: whitespace tokens
    (a newline, a double space) neither start nor end a span and are not counted, so ``a\nb`` has the
    spans ``a b`` has. ``blank``, a mask over the doc's tokens (:func:`blank_tokens` of its vectors), makes
    the tokens without word pieces count as whitespace too: a BOM, a zero-width space, a soft hyphen, a
    lone combining accent carry no evidence, so they are never a span's edge nor a span alone. With
    ``skip_punct`` no span starts or ends on a punctuation token either. Such spans are never sensible
    mentions, and dropping them shrinks the candidate set a lot. A gold
    mention that does start or end with punctuation (e.g. ``"Na(+)"``) is then not enumerable: callers
    training the scorer should use ``skip_punct=False`` or check their gold spans against the result.
    Ordered by start, then by length, as :func:`enumerate_spans`.
    """
    space = np.fromiter((t.is_space for t in doc), dtype=bool, count=len(doc))
    if blank is not None:
        space |= np.asarray(blank.cpu() if isinstance(blank, torch.Tensor) else blank, dtype=bool)
    words = np.flatnonzero(~space)
    starts, ends = enumerate_spans(len(words), max_len)
    starts, ends = words[starts], words[ends - 1] + 1
    if not skip_punct or len(starts) == 0:
        return starts, ends
    punct = np.fromiter((t.is_punct for t in doc), dtype=bool, count=len(doc))
    keep = ~punct[starts] & ~punct[ends - 1]
    return starts[keep], ends[keep]


def within_passages(doc, starts, ends) -> np.ndarray:
    """A mask of the spans ``[start, end)`` of ``doc`` that cross no passage start the doc carries
    (``doc.user_data[PASSAGES_KEY]``: PubTator's abstract, after ``title + " "``); all kept for a doc without."""
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    keep = np.ones(len(starts), dtype=bool)
    cuts = doc.user_data.get(PASSAGES_KEY) if len(starts) else None
    if cuts:
        first = np.searchsorted(np.fromiter((t.idx for t in doc), dtype=np.int64, count=len(doc)), cuts)
        for k in first:  # the passage's first token: a span may start there, not hold it inside
            keep &= ~((starts < k) & (ends > k))
    return keep


BRACKETS = (("(", ")"), ("[", "]"))


def bracket_balanced(doc, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A mask of the spans ``[start, end)`` of ``doc`` that cut through no bracket pair: every ``)`` or
    ``]`` in the span closes one opened in it, and none it opens is left open (``retinoic acid (RA``,
    ``HBV) infection`` are out; ``Na(+)``, ``IL-2 (human)`` are in). Counted per token's characters."""
    keep = np.ones(len(starts), dtype=bool)
    if len(starts) == 0:
        return keep
    span_len = int((ends - starts).max())
    for opening, closing in BRACKETS:
        net = np.fromiter((t.text.count(opening) - t.text.count(closing) for t in doc), dtype=np.int64, count=len(doc))
        depth = np.concatenate([[0], np.cumsum(net)])  # depth[i]: open brackets before token i
        lowest = np.full(len(starts), np.iinfo(np.int64).max)
        for k in range(1, span_len + 1):  # the lowest depth after each of the span's tokens
            inside = starts + k <= ends
            lowest[inside] = np.minimum(lowest[inside], depth[(starts + k)[inside]])
        keep &= (depth[ends] == depth[starts]) & (lowest >= depth[starts])
    return keep


def as_index(x, device: torch.device) -> torch.Tensor:
    """An int64 tensor on ``device`` from a numpy array, list or tensor."""
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=torch.long)
    return torch.as_tensor(np.asarray(x, dtype=np.int64), device=device)


def check_spans(n: int, starts: torch.Tensor, ends: torch.Tensor) -> None:
    if starts.shape != ends.shape or starts.dim() != 1:
        raise ValueError("starts and ends must be 1-d and of the same length")
    if len(starts) and (bool((starts < 0).any()) or bool((ends > n).any()) or bool((ends <= starts).any())):
        raise ValueError(f"spans must satisfy 0 <= start < end <= {n}")


def prefix_sum(x: torch.Tensor) -> torch.Tensor:
    """Cumulative sum along dim 0 with a leading zero row, in float64 so long documents stay exact."""
    c = torch.cumsum(x.to(torch.float64), dim=0)
    return torch.cat([torch.zeros_like(c[:1]), c])


def blank_tokens(H: torch.Tensor) -> torch.Tensor:
    """A mask of the tokens without word pieces (whitespace: a newline, a double space, NBSP), whose
    vectors :func:`encode_docs` leaves zero: the transformer never saw them, so span models treat them
    as absent."""
    return ~H.detach().any(dim=-1)


def span_means(H: torch.Tensor, starts, ends) -> torch.Tensor:
    """Mean of ``H[start:end]`` for every span, ``[S, hidden]``, via one cumulative sum; tokens without
    word pieces (:func:`blank_tokens`) are left out of the mean."""
    st, en = as_index(starts, H.device), as_index(ends, H.device)
    check_spans(H.shape[0], st, en)
    c = prefix_sum(H)
    sums = c[en] - c[st]
    seen = prefix_sum(~blank_tokens(H))
    counts = (seen[en] - seen[st]).clamp(min=1)
    return (sums / counts.unsqueeze(1).to(sums.dtype)).to(H.dtype)


def span_link_vectors(encoder: BiEncoder, H: torch.Tensor, starts, ends) -> torch.Tensor:
    """Span vectors for linking: :func:`span_means`, normalised as the encoder's similarity asks."""
    return encoder._finish(span_means(H, starts, ends))
