"""Where and in which precision the towers run: the device (``"auto"``: CUDA when present), and
``"auto"`` precision resolved to bf16 where the hardware computes it natively (a CUDA device with bf16,
a CPU with ``avx512_bf16`` / ``amx_bf16``), else fp32 — and for the towers' inference, int8 on a CPU
with VNNI and no bf16. ``"int8"`` (block-wise, answers independent of batching) and ``"int8_dynamic"``
(per-batch activation scales, the fastest) are ONNX Runtime CPU paths (:mod:`spacy_pel.models.onnx_tower`).
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch

PRECISIONS = ("fp32", "bf16", "int8", "int8_dynamic", "auto")
SEARCH_PRECISIONS = ("fp32", "bf16", "int8", "auto")  # an exact KB search's (int8: screened, then rescored)
INT8_PRECISIONS = ("int8", "int8_dynamic")
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
VNNI_CPU_FLAGS = ("avx512_vnni", "avx_vnni")


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


def resolve_precision(precision: str, device: torch.device) -> str:
    """``"auto"`` → ``"bf16"`` on a CUDA device with bf16 or a CPU with bf16 units, else ``"fp32"``
    (``"int8"`` stays itself: :meth:`BiEncoder.runtime_model` applies it)."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_bf16() else "fp32"


def index_precision(precision: str, device: torch.device) -> str:
    """The precision a KB's entity and name vectors are encoded in: as asked, except that ``"auto"`` is
    :func:`resolve_precision`'s (bf16 or fp32), never int8 — a MeSH KB encoded by block-wise int8 towers
    lost 0.5 pt of retriever R@1 on BC5CDR dev (0.7034 vs 0.7082, benchmarks/int8_blockwise.md), where
    int8 mention vectors cost 0.03 pt in the pipeline."""
    return resolve_precision(precision, device)  # which, unlike tower_precision, never answers int8 for "auto"


def search_precision(precision: str, device: torch.device) -> str:
    """The precision of an exact KB search (``spacy_pel.retrieval.search``): :func:`resolve_precision`'s,
    except that ``"auto"`` on a CPU without bf16 units but with VNNI is ``"int8"`` (int8 candidates,
    rescored exactly in float32: benchmarks/int8_search.md), and an int8 precision asked for stays
    ``"int8"`` on a CPU (elsewhere: float32)."""
    resolved = tower_precision(precision, device)
    return "int8" if resolved in INT8_PRECISIONS else resolved


def tower_precision(precision: str, device: torch.device) -> str:
    """The precision the towers run inference in: :func:`resolve_precision`'s, except that

    * ``"auto"`` on a CPU without bf16 units but with VNNI is ``"int8"`` (block-wise: R@1 as fp32's,
      ~1.2× its speed, the same answers however mentions are batched; benchmarks/int8_blockwise.md);
    * the int8 paths (ONNX Runtime) are CPU paths: elsewhere they run in fp32.

    ``"auto"`` never chooses ``"int8_dynamic"``, the fastest: it quantises activations per batch, so a
    mention's vector depends slightly on the mentions batched with it, and a default should give the
    same answer for the same text however it is batched."""
    resolved = resolve_precision(precision, device)
    if precision == "auto" and resolved == "fp32" and device.type == "cpu" and cpu_has_vnni():
        return "int8"
    return "fp32" if resolved in INT8_PRECISIONS and device.type != "cpu" else resolved
