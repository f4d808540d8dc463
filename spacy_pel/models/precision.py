"""Where and in which precision the towers run: the device (``"auto"``: CUDA when present), and
``"auto"`` precision resolved to bf16 where the hardware computes it natively (a CUDA device with bf16,
a CPU with ``avx512_bf16`` / ``amx_bf16``), else fp32 — for encoding a KB on a CPU, fp32 run by ONNX
Runtime (``"onnx_fp32"``: the same vectors to ~1e-6, 10-17% faster than torch's), or int8 for
its name rows where the CPU has VNNI (:func:`index_precision`) —, and for the towers' linking int8 on an
x86 CPU without bf16 (``"int8_rows"``: torch's int8 products, activations quantised per row,
:mod:`spacy_pel.models.int8_rows`). ``"int8"`` (block-wise, answers independent of batching),
``"int8_dynamic"`` (per-batch activation scales) and ``"onnx_fp32"`` are ONNX Runtime CPU paths
(:mod:`spacy_pel.models.onnx_tower`); training always runs the torch towers.
"""
from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Optional

import torch

from .int8_rows import int_mm_available

PRECISIONS = ("fp32", "bf16", "int8", "int8_rows", "int8_dynamic", "onnx_fp32", "auto")
SEARCH_PRECISIONS = ("fp32", "bf16", "int8", "auto")  # an exact KB search's (int8: screened, then rescored)
INT8_PRECISIONS = ("int8", "int8_rows", "int8_dynamic")
# the precisions torch runs as an int8 copy of the tower on a CPU (inference only): spacy_pel.models.int8_rows
TORCH_INT8_PRECISIONS = ("int8_rows",)
# the precisions ONNX Runtime runs on a CPU (inference only), with the quantisation of their ONNX copy
ONNX_QUANTIZATIONS = {"int8": "blockwise", "int8_dynamic": "dynamic", "onnx_fp32": "none"}
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
VNNI_CPU_FLAGS = ("avx512_vnni", "avx_vnni")
AVX2_CPU_FLAGS = ("avx2",)


def device_problem(device: str) -> Optional[str]:
    """Why torch cannot run on ``device`` on this machine, or None: ``auto`` (CUDA when present), ``cpu``,
    or a device it has (``cuda``, ``cuda:1``, ``mps`` …)."""
    if device == "auto":
        return None
    try:
        kind = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        return f"must be 'auto', 'cpu' or a torch device such as 'cuda', not {device!r}"
    if kind.type == "cpu":
        return None
    backend = getattr(torch, kind.type, None)  # torch.cuda, torch.mps, torch.xpu
    count = backend.device_count() if hasattr(backend, "is_available") and backend.is_available() else 0
    if count > (kind.index or 0):
        return None
    return f"{device!r} is not a device of this machine ({count} {kind.type} device(s)); use 'auto' (CUDA when present) or 'cpu'"


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@functools.lru_cache(maxsize=None)
def _cpu_flags() -> frozenset:
    """The words of Linux's ``/proc/cpuinfo`` (empty elsewhere), read once a process: the towers ask
    for their precision on every batch."""
    try:
        return frozenset(Path("/proc/cpuinfo").read_text(encoding="utf8", errors="replace").split())
    except OSError:
        return frozenset()


def _cpu_has(flags: tuple) -> bool:
    """Whether ``/proc/cpuinfo`` lists one of ``flags``."""
    return any(flag in _cpu_flags() for flag in flags)


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively. Without such units bf16 matrix products are emulated
    and slower than fp32."""
    return _cpu_has(BF16_CPU_FLAGS)


def cpu_has_vnni() -> bool:
    """Whether this CPU has the VNNI int8 dot-product instructions ONNX Runtime's int8 kernels use."""
    return _cpu_has(VNNI_CPU_FLAGS)


def cpu_has_avx2() -> bool:
    """Whether this CPU has AVX2 (on which torch's int8 products are exact with 7-bit weights:
    :func:`spacy_pel.models.int8_rows.int_mm_weight_limit`)."""
    return _cpu_has(AVX2_CPU_FLAGS)


def resolve_precision(precision: str, device: torch.device) -> str:
    """``"auto"`` → ``"bf16"`` on a CUDA device with bf16 or a CPU with bf16 units, else ``"fp32"``
    (``"int8"`` stays itself: :meth:`BiEncoder.runtime_model` applies it)."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_bf16() else "fp32"


def index_precision(precision: str, device: torch.device, rows: str = "entities") -> str:
    """The precision a KB's entity rows (``rows="entities"``) or name rows (``"names"``) are encoded in: as
    asked, except that ``"auto"`` is :func:`resolve_precision`'s bf16, or on a CPU without bf16

    * name rows: int8 on a CPU with VNNI — ``"int8_rows"`` (torch's int8 products, activations per row:
      MeSH's 756,400 names in 12.1 min against block-wise ``"int8"``'s 12.8 the same day on a simulated Xeon, the
      pipeline's BC5CDR dev R@1 0.9325 vs 0.9317, benchmarks/index_rows_int8rows_s51.md), or block-wise
      ``"int8"`` where torch has no int8 product (18.2 → 13.5 min against ``"onnx_fp32"``, R@1 0.9316 vs
      0.9317, benchmarks/index_rows_int8.md) — else ``"onnx_fp32"``;
    * entity rows: ``"onnx_fp32"`` (fp32 by ONNX Runtime: MeSH entities 1.17× torch fp32's rate,
      benchmarks/onnx_fp32.md) — never int8: a MeSH KB encoded by block-wise int8 towers lost 0.5 pt of
      retriever-alone R@1 on BC5CDR dev (0.7034 vs 0.7082, benchmarks/int8_blockwise.md), though not in
      the pipeline (0.9319 vs 0.9317, benchmarks/index_rows_int8.md)."""
    if rows not in ("entities", "names"):
        raise ValueError(f"rows must be 'entities' or 'names', not {rows!r}")
    resolved = resolve_precision(precision, device)
    if precision != "auto" or resolved != "fp32" or device.type != "cpu":
        return resolved
    if rows == "names" and cpu_has_vnni():
        return "int8_rows" if int_mm_available() else "int8"
    return "onnx_fp32"


def search_precision(precision: str, device: torch.device) -> str:
    """The precision of an exact KB search (``spacy_pel.retrieval.search``): :func:`resolve_precision`'s,
    except that ``"auto"`` on a CPU without bf16 units but with VNNI is ``"int8"`` (int8 candidates,
    rescored exactly in float32: benchmarks/int8_search.md; without VNNI, float32), and an int8 precision
    asked for stays ``"int8"`` on a CPU (elsewhere: float32)."""
    resolved = tower_precision(precision, device)
    if resolved in INT8_PRECISIONS:
        # the int8 screen is ONNX Runtime's VNNI product; without VNNI, "auto" searches in float32
        return "int8" if precision != "auto" or cpu_has_vnni() else "fp32"
    return "fp32" if resolved == "onnx_fp32" else resolved


def tower_precision(precision: str, device: torch.device) -> str:
    """The precision the towers run inference in: :func:`resolve_precision`'s, except that

    * ``"auto"`` on a CPU without bf16 units but with VNNI is ``"int8_rows"`` (torch's int8 products,
      activations quantised per row: the pipeline's R@1 as fp32's, the same answers however mentions are
      batched, ~1.1× torch fp32's and ~1.25× block-wise ``"int8"``'s mentions/s on a simulated Xeon,
      benchmarks/int8_rows_nobf16_s51.md), or block-wise ``"int8"`` where torch has no int8 product;
      on a CPU with AVX2 and neither, ``"int8_rows"`` with 7-bit weights (exact there; +8–12% over torch
      fp32, R@1 0.9308 vs 0.9315, benchmarks/int8_rows_avx2_s52.md), else torch's fp32, which links faster
      than ``"onnx_fp32"`` (torch computes the last layer at the pooled positions only;
      benchmarks/avx2_cpu_speed.md); not x86 (no AVX2 flag): fp32;
    * the ONNX Runtime paths (:data:`ONNX_QUANTIZATIONS`) and ``"int8_rows"`` are CPU paths: elsewhere
      they run in fp32; ``"int8_rows"`` on a CPU without exact int8 products runs block-wise
      ``"int8"``, with a warning (a pipeline saved with it still links on another machine).

    ``"auto"`` never chooses ``"int8_dynamic"``, the fastest: it quantises activations per batch, so a
    mention's vector depends slightly on the mentions batched with it, and a default should give the
    same answer for the same text however it is batched."""
    resolved = resolve_precision(precision, device)
    if device.type != "cpu":
        return "fp32" if resolved in ONNX_QUANTIZATIONS or resolved in TORCH_INT8_PRECISIONS else resolved
    if precision == "auto" and resolved == "fp32" and (cpu_has_vnni() or cpu_has_avx2()):
        if int_mm_available():
            return "int8_rows"
        return "int8" if cpu_has_vnni() else "fp32"
    if resolved in TORCH_INT8_PRECISIONS and not int_mm_available():
        warnings.warn("precision 'int8_rows' needs exact int8 matrix products (a CPU with VNNI or AVX2); this one has "
                      "none, so the towers run block-wise 'int8' (ONNX Runtime) instead", stacklevel=2)
        return "int8"
    return resolved
