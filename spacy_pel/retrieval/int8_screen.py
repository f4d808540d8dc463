"""An int8 first pass over a KB's vectors: the best ``depth`` rows of each query found with int8
products, which the exact search then rescores in its own precision.

The entity vectors are held a second time as block-wise int8 (one scale per 128 values of a row, 136 MB
for MeSH's 354k × 384) inside an ONNX Runtime ``MatMulNBits`` + ``TopK`` graph: the kernel quantises each
query itself (one scale per query and block) and multiplies in int8 (VNNI on x86), so a query's
candidates depend on that query alone, however queries are batched. Over MeSH on 2 cores this takes
2.4-3.4× less time than a float32 product with ``torch.topk`` (one linking pass over BC5CDR dev: the
search 0.69 → 0.35 s, the pipeline +7%; ``benchmarks/int8_search.md``). The int8 scores only choose
which rows are rescored: the scores a search returns are the exact products.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import onnxruntime
import torch
from onnx import TensorProto, helper, numpy_helper

from ..models.forked_sessions import made_here
from ..models.int8_blockwise import ACCURACY_INT8, BLOCK_SIZE, MS_DOMAIN, pack_int8_rows
from ..models.onnx_tower import cpu_session_options

QUERIES, WEIGHTS, SCALES, DEPTH = "queries", "weights", "scales", "depth"
PACK_ROWS = 1 << 14  # rows quantised at once
SHARD_ROWS = 1 << 21  # rows a session screens (2M × 384 dims: 0.8 GB of int8, below ONNX's 2 GB model limit)
SCORES_PER_CALL = 1 << 24  # queries × rows scored a call (64 MB of float32 scores)


def screen_graph(packed: np.ndarray, scales: np.ndarray, dim: int) -> bytes:
    """The serialised ONNX graph: ``queries [m, dim]`` × the int8 rows (``packed [n, blocks, block_size]``,
    ``scales [n * blocks]``) → ``TopK(depth)`` (values, row numbers)."""
    n, blocks, block_size = packed.shape
    nodes = [
        helper.make_node("MatMulNBits", [QUERIES, WEIGHTS, SCALES], ["scores"], domain=MS_DOMAIN, K=dim, N=n, bits=8,
                         block_size=block_size, accuracy_level=ACCURACY_INT8),
        helper.make_node("TopK", ["scores", DEPTH], ["values", "rows"], axis=1, largest=1, sorted=1),
    ]
    inputs = [
        helper.make_tensor_value_info(QUERIES, TensorProto.FLOAT, ["m", dim]),
        helper.make_tensor_value_info(DEPTH, TensorProto.INT64, [1]),
    ]
    weights = [numpy_helper.from_array(packed, WEIGHTS), numpy_helper.from_array(scales, SCALES)]
    outputs = [helper.make_tensor_value_info("values", TensorProto.FLOAT, ["m", "k"]),
               helper.make_tensor_value_info("rows", TensorProto.INT64, ["m", "k"])]
    model = helper.make_model(helper.make_graph(nodes, "int8_screen", inputs, outputs, weights),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS_DOMAIN, 1)])
    return model.SerializeToString()


def pack_in_chunks(matrix, block_size: int = BLOCK_SIZE) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`pack_int8_rows` of ``matrix`` (an array or tensor ``[n, dim]``, any float dtype), a chunk of rows
    at a time: no float32 copy of the whole matrix is made."""
    n, dim = matrix.shape
    blocks = -(-dim // block_size)
    packed, scales = np.empty((n, blocks, block_size), np.uint8), np.empty((n, blocks), np.float32)
    for start in range(0, n, PACK_ROWS):
        chunk = matrix[start : start + PACK_ROWS]
        chunk = chunk.float().numpy() if isinstance(chunk, torch.Tensor) else np.asarray(chunk, np.float32)
        part, part_scales = pack_int8_rows(chunk, block_size)
        packed[start : start + len(chunk)], scales[start : start + len(chunk)] = part, part_scales.reshape(-1, blocks)
    return packed, scales.reshape(-1)


class Int8Screen:
    """The best ``depth`` rows of a matrix for each query, by block-wise int8 products. A matrix of more than
    ``SHARD_ROWS`` rows is screened in shards (an ONNX model holds at most 2 GB), each giving its own best
    ``depth``: the rows returned are then a superset of the whole matrix's best ``depth``."""

    def __init__(self, matrix, threads: Optional[int] = None, block_size: int = BLOCK_SIZE):
        """``matrix``: the ``[n, dim]`` float vectors screened (an array or a tensor). ``threads``: ONNX
        Runtime's intra-op threads (default: torch's current setting)."""
        self.n, dim = matrix.shape
        options = cpu_session_options(threads)
        options.enable_cpu_mem_arena = False  # the scores of a call are freed after it, not kept for the next
        self.shards = []  # (first row, rows, session)
        for start in range(0, self.n, SHARD_ROWS):
            packed, scales = pack_in_chunks(matrix[start : start + SHARD_ROWS], block_size)
            session = onnxruntime.InferenceSession(screen_graph(packed, scales, dim), options, providers=["CPUExecutionProvider"])
            self.shards.append((start, len(packed), session))
        self.queries_per_call = max(1, SCORES_PER_CALL // max(1, min(self.n, SHARD_ROWS)))
        made_here(self)  # a forked child makes its own, never runs nor frees this one (..models.forked_sessions)

    def __call__(self, queries: np.ndarray, depth: int) -> np.ndarray:
        """Row numbers ``[m, d]`` of each query's best rows by int8 score: with one shard, its best
        ``d = min(depth, n)`` in order; with several, each shard's best in turn (not ordered across shards)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        found = []
        for start, rows, session in self.shards:
            feed_depth = np.array([min(depth, rows)], np.int64)
            parts = [session.run(["rows"], {QUERIES: queries[q : q + self.queries_per_call], DEPTH: feed_depth})[0]
                     for q in range(0, len(queries), self.queries_per_call)]
            found.append((np.concatenate(parts) if parts else np.zeros((0, int(feed_depth[0])), np.int64)) + start)
        return np.concatenate(found, axis=1)
