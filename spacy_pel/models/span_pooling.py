"""Span pooling at inference with the last layer computed only where it is pooled.

A mention's vector is the mean of the last layer's states over its ``[M_s] … [M_e]`` positions
(``mention_pooling = "span"``): the other ~90% of a 64-piece input feed the last layer's keys and
values but their own outputs are thrown away. This runs the transformer up to its last layer as
usual, then that layer for the pooled positions alone: queries, attention output and feed-forward
at those positions, keys and values over every position. It is the same arithmetic, minus the rows
nobody reads (vectors equal to the full forward's to float rounding; ``tests/test_span_pooling.py``),
and saves about a sixth of the mention tower's time.

Only for towers whose layers have BERT's structure (``bert``, ``roberta``, ``xlm-roberta`` with
absolute positions: ``attention.self.query/key/value``, ``attention.output``, ``intermediate``,
``output``), and only in eval mode without gradients: :func:`pooled_last_layer` returns None otherwise
and the caller runs the whole model.
"""
from __future__ import annotations

import threading
from typing import Optional

import torch

MODEL_TYPES = ("bert", "roberta", "xlm-roberta")


class _Stop(Exception):
    """Raised by the hook on the last layer once it has its input (the model need not go on)."""


def last_layer(model: torch.nn.Module) -> Optional[torch.nn.Module]:
    """The model's last transformer layer when this module knows how to run it, else None."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in MODEL_TYPES or getattr(config, "is_decoder", False):
        return None
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        return None
    layers = getattr(getattr(model, "encoder", None), "layer", None)
    if not layers:
        return None
    layer = layers[-1]
    attention = getattr(layer, "attention", None)
    parts = (getattr(attention, "self", None), getattr(attention, "output", None), getattr(layer, "intermediate", None),
             getattr(layer, "output", None))
    if any(p is None for p in parts) or not all(hasattr(parts[0], a) for a in ("query", "key", "value", "attention_head_size")):
        return None
    return layer


def hidden_before(model: torch.nn.Module, layer: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The hidden states that enter ``layer`` (the model's own embeddings, masks and earlier layers).
    The hook is on the shared layer, so it fires for any thread's pass through it: it takes only its own
    thread's (one pipeline linking from several threads, e.g. a web server's)."""
    seen = {}
    caller = threading.get_ident()

    def hook(module, args, kwargs):
        if threading.get_ident() != caller:
            return None  # another thread's pass: its own hook takes it
        seen["hidden"] = args[0] if args else kwargs["hidden_states"]
        raise _Stop

    handle = layer.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        model(input_ids=ids, attention_mask=mask)
    except _Stop:
        pass
    finally:
        handle.remove()
    return seen["hidden"]


def pooled_positions(pool: torch.Tensor):
    """``(positions [B, S], valid [B, S])``: each row's pooled positions in order, padded to the longest."""
    counts = pool.sum(1)
    width = max(1, int(counts.max()))
    positions = torch.argsort(pool, dim=1, descending=True, stable=True)[:, :width]
    valid = torch.arange(width, device=pool.device)[None, :] < counts[:, None]
    return positions, valid


def pooled_last_layer(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, pool: torch.Tensor) -> Optional[torch.Tensor]:
    """``[B, hidden]``: the mean over ``pool``'s positions of ``model``'s last hidden states, the last
    layer computed at those positions only; None when it cannot be (gradients on, training mode, another
    architecture)."""
    layer = last_layer(model)
    if layer is None or torch.is_grad_enabled() or model.training:  # training mode: dropout, as the full forward has it
        return None
    hidden = hidden_before(model, layer, ids, mask)
    positions, valid = pooled_positions(pool)
    b, t, h = hidden.shape
    s = positions.shape[1]
    picked = torch.gather(hidden, 1, positions[..., None].expand(b, s, h))
    attn = layer.attention.self
    heads, size = attn.num_attention_heads, attn.attention_head_size
    q = attn.query(picked).view(b, s, heads, size).transpose(1, 2)
    k = attn.key(hidden).view(b, t, heads, size).transpose(1, 2)
    v = attn.value(hidden).view(b, t, heads, size).transpose(1, 2)
    keys = mask.bool()[:, None, None, :]
    context = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keys, scale=size**-0.5)
    context = context.transpose(1, 2).reshape(b, s, heads * size)
    after_attention = layer.attention.output(context, picked)
    out = layer.output(layer.intermediate(after_attention), after_attention)
    weights = valid[..., None].to(out.dtype)
    return (out * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
