"""Context dropout (``[augment] context_dropout``): a share of each mention batch seen without its context.

A retriever trained on mentions in context can learn to recognise an entity by the words around its
mentions rather than by the mention's own words: what the training documents say about a *seen* entity
helps on text like them, and nothing on an entity no training mention names (issue 28's unseen-entity
R@1, and held-out corpora whose contexts differ). With probability ``share`` each mention of a batch
is encoded as ``[CLS] [M_s] mention [M_e] [SEP]`` instead of with its window of context, so the
mention tower keeps linking from the mention's words alone. Measured at 0.3 on NCBI disease + MEDIC
and on BC5CDR + MeSH (``benchmarks/*_context_dropout30_workflow.md``): the retriever alone gains a few
tenths, the assembled pipeline nothing, so it is off by default. Which mentions lose
their context depends on the seed and the step only, so a resumed run draws the same ones. Inference
always reads the context.
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

from .stages import Examples

MarkedInput = Tuple[List[int], Tuple[int, int]]
STREAM = 7919  # this augmentation's own random stream beside the batch order's


def without_context(item: MarkedInput, cls_id: int, sep_id: int) -> MarkedInput:
    """``[CLS] [M_s] mention [M_e] [SEP]`` of a marked input (its marker positions inclusive)."""
    seq, (start, end) = item
    return [cls_id, *seq[start : end + 1], sep_id], (1, 1 + end - start)


def drop_context(examples: Examples, share: float, seed: int, step: int, cls_id: int, sep_id: int) -> Examples:
    """``examples`` with each input, with probability ``share`` (drawn from ``seed`` and ``step``),
    replaced by its mention alone; the gold rows are unchanged."""
    if share <= 0 or not len(examples):
        return examples
    drop = np.random.default_rng([seed, step, STREAM]).random(len(examples)) < share
    inputs = [without_context(x, cls_id, sep_id) if d else x for x, d in zip(examples.inputs, drop)]
    return Examples(inputs, examples.gold)
