"""``python -m spacy_pel.train_spans``: train the end-to-end span scorer (SPEC §2).

Token vectors come from one pass of the encoder's mention transformer over each document
(:func:`spacy_pel.spans.encode_docs`); every span of at most ``max_len`` tokens is scored
``σ(w_sᵀh_i + w_eᵀh_j + Σ w_mᵀh_q)`` and trained with binary cross-entropy (gold spans positive,
all other enumerated spans negative). This trainer keeps the transformer frozen — the scorer alone
learns, in seconds on a CPU, from token vectors computed once — and then picks the threshold γ
with the best strict span F1 on the dev corpus. (The paper trains the transformer jointly with the
linking loss; that costs a backward pass through every document and is left to a GPU.)
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np
import torch
from tqdm.auto import tqdm

from ..models.encoder import BiEncoder
from ..corpora import gold_spans
from ..models.doc_encoder import MAX_SPAN_LEN, encode_docs, enumerate_doc_spans
from ..models.span_scorer import SpanScorer, greedy_non_overlapping, save_span_scorer


def span_examples(encoder: BiEncoder, docs, max_len: int) -> Tuple[list, dict]:
    """Per doc: (token vectors, starts, ends, labels); counts of gold spans not enumerable."""
    hidden = encode_docs(encoder, docs)
    out, missed, total = [], 0, 0
    for doc, H in zip(docs, hidden):
        starts, ends = enumerate_doc_spans(doc, max_len)
        index = {(int(s), int(e)): i for i, (s, e) in enumerate(zip(starts, ends))}
        labels = np.zeros(len(starts), np.float32)
        for span in gold_spans(doc):
            total += 1
            i = index.get((span.start, span.end))
            if i is None:
                missed += 1
            else:
                labels[i] = 1.0
        out.append((H, starts, ends, labels))
    return out, {"gold_spans": total, "not_enumerable": missed}


def detect(scorer: SpanScorer, H, starts, ends, threshold: float) -> List[Tuple[int, int]]:
    """Kept spans: probability above ``threshold``, overlaps resolved greedily by score."""
    if len(starts) == 0:
        return []
    with torch.no_grad():
        probs = scorer.probs(H, starts, ends).cpu().numpy()
    keep = np.flatnonzero(probs > threshold)
    chosen = greedy_non_overlapping(starts[keep], ends[keep], probs[keep])
    return [(int(starts[keep][i]), int(ends[keep][i])) for i in chosen]


def span_f1(scorer: SpanScorer, examples, threshold: float) -> dict:
    tp = n_pred = n_gold = 0
    for H, starts, ends, labels in examples:
        pred = set(detect(scorer, H, starts, ends, threshold))
        gold = {(int(s), int(e)) for s, e, y in zip(starts, ends, labels) if y}
        tp, n_pred, n_gold = tp + len(pred & gold), n_pred + len(pred), n_gold + len(gold)
    p, r = tp / max(n_pred, 1), tp / max(n_gold, 1)
    return {"p": round(p, 4), "r": round(r, 4), "f": round(2 * p * r / max(p + r, 1e-12), 4)}


def train_span_scorer(
    encoder: BiEncoder,
    train_docs: Sequence,
    dev_docs: Sequence,
    output: Path,
    max_len: int = MAX_SPAN_LEN,
    epochs: int = 8,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = True,
) -> dict:
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    train, train_counts = span_examples(encoder, train_docs, max_len)
    dev, dev_counts = span_examples(encoder, dev_docs, max_len)
    encode_s = time.perf_counter() - t0
    scorer = SpanScorer(encoder.mention_model.config.hidden_size).to(encoder.device_)
    optimizer = torch.optim.Adam(scorer.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for _ in tqdm(range(epochs), desc="span scorer epochs", disable=not progress):
        for i in rng.permutation(len(train)):
            H, starts, ends, labels = train[i]
            if len(starts) == 0:
                continue
            loss = loss_fn(scorer(H, starts, ends), torch.from_numpy(labels).to(H.device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    grid = [0.02, 0.05, *np.arange(0.1, 0.95, 0.05)]
    best = max(((t, span_f1(scorer, dev, t)) for t in grid), key=lambda x: x[1]["f"])
    output.mkdir(parents=True, exist_ok=True)
    save_span_scorer(scorer, output / "span_scorer.safetensors")
    report = {
        "threshold": round(float(best[0]), 2),
        "dev_span_strict": best[1],
        "train": train_counts,
        "dev": dev_counts,
        "max_len": max_len,
        "encode_s": round(encode_s, 1),
        "total_s": round(time.perf_counter() - t0, 1),
    }
    (output / "span_report.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    return report
