"""How ``pel_linker`` computes mention vectors: registered strategies, chosen in the config.

* ``spacy_pel.vectors.per_mention.v1`` — one marked-up input per mention,
  ``[CLS] left [M_s] mention [M_e] right [SEP]`` in ``context_window`` word pieces (SPEC §1);
* ``spacy_pel.vectors.mention_text.v1`` — the mention's own words alone, ``[CLS] [M_s] mention [M_e] [SEP]``:
  the input ``adapt`` trains on, for an encoder taught only the KB's synonyms (no annotated text),
  which links better without context than with it (``benchmarks/adapt_alone.md``);
* ``spacy_pel.vectors.collective.v1`` — one transformer pass per document (≤ 512-piece windows),
  every mention's vector the normalised mean of its tokens' vectors (SPEC §2): linking N mentions
  costs one pass, not N. If the mention source already encoded the documents (the span finder),
  its pass is reused.

A strategy is called as ``strategy(encoder, docs, spans, batch_size, hidden)`` with ``spans`` per doc
as ``(start, end, label)`` and ``hidden`` the documents' token vectors or None; it returns one row
per mention, in order, ``[n, dim]`` float32.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import torch
from spacy.tokens import Doc
from spacy.util import registry

from ..models.doc_encoder import encode_docs, span_link_vectors
from ..models.encoder import BiEncoder, Mention
from .contracts import VectorStrategy
from .mentions import docs_per_pass


def per_mention_vectors(
    encoder: BiEncoder, docs: Sequence[Doc], spans: Sequence[list], batch_size: int, hidden: Optional[list] = None
) -> np.ndarray:
    """One marked-up input per mention (``hidden`` is not used)."""
    mentions = []
    for d, sp in zip(docs, spans):
        text = d.text if sp else ""  # once per doc: Doc.text joins a Token object per token
        mentions.extend(Mention(text, d[a].idx, d[b - 1].idx + len(d[b - 1])) for a, b, _ in sp)
    return encoder.encode_mentions(mentions, batch_size=batch_size)


def mention_text_vectors(
    encoder: BiEncoder, docs: Sequence[Doc], spans: Sequence[list], batch_size: int, hidden: Optional[list] = None
) -> np.ndarray:
    """One marked-up input per mention with no context: its own text only (``hidden`` is not used)."""
    words = [d[a:b].text for d, sp in zip(docs, spans) for a, b, _ in sp]
    return encoder.encode_mentions([Mention(w, 0, len(w)) for w in words], batch_size=batch_size)


def collective_vectors(
    encoder: BiEncoder, docs: Sequence[Doc], spans: Sequence[list], batch_size: int, hidden: Optional[list] = None
) -> np.ndarray:
    """One pass per document with mentions (or the pass in ``hidden``); each span's normalised mean."""
    if hidden is None:
        busy = [(d, sp) for d, sp in zip(docs, spans) if sp]
        states: List[torch.Tensor] = encode_docs(encoder, [d for d, _ in busy], batch_size=docs_per_pass(batch_size)) if busy else []
    else:
        busy = [(d, sp) for d, sp in zip(docs, spans)]
        states = list(hidden)
    pairs = [(sp, H) for (_, sp), H in zip(busy, states) if sp]
    if not pairs:
        return np.zeros((0, encoder.dim), np.float32)
    with torch.inference_mode():
        return np.concatenate(
            [
                span_link_vectors(encoder, H, [a for a, _, _ in sp], [b for _, b, _ in sp]).cpu().numpy()
                for sp, H in pairs
            ]
        )


@registry.misc("spacy_pel.vectors.per_mention.v1")
def per_mention() -> VectorStrategy:
    """One marked-up input per mention."""
    return per_mention_vectors


@registry.misc("spacy_pel.vectors.mention_text.v1")
def mention_text() -> VectorStrategy:
    """One input per mention, its own words without context (for a KB-adapted encoder)."""
    return mention_text_vectors


@registry.misc("spacy_pel.vectors.collective.v1")
def collective() -> VectorStrategy:
    """One transformer pass per document."""
    return collective_vectors
