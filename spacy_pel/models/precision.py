"""Where and in which precision the towers run: the device (``"auto"``: CUDA when present), and
``"auto"`` precision resolved to bf16 where the hardware computes it natively (a CUDA device with bf16,
a CPU with ``avx512_bf16`` / ``amx_bf16``), else fp32; ``"int8"`` is ONNX Runtime's static int8, a CPU
path (:mod:`spacy_pel.models.onnx_tower`). A linker's ``"auto"`` goes one step further
(:func:`linker_precision`): int8 on a CPU without bf16 units that has the VNNI int8 instructions.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

PRECISIONS = ("fp32", "bf16", "int8", "auto")
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
VNNI_CPU_FLAGS = ("avx512_vnni", "avx_vnni")  # int8 dot products: what makes ONNX Runtime's int8 fast


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset:
    """This CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        return frozenset(Path("/proc/cpuinfo").read_text(encoding="utf8", errors="replace").split())
    except OSError:
        return frozenset()


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively. Without such units bf16 matrix products are emulated
    and slower than fp32."""
    return any(flag in cpu_flags() for flag in BF16_CPU_FLAGS)


def cpu_has_vnni() -> bool:
    """Whether this CPU has the VNNI int8 dot-product instructions (``avx512_vnni`` / ``avx_vnni``)."""
    return any(flag in cpu_flags() for flag in VNNI_CPU_FLAGS)


def resolve_precision(precision: str, device: torch.device) -> str:
    """``"auto"`` → ``"bf16"`` on a CUDA device with bf16 or a CPU with bf16 units, else ``"fp32"``
    (``"int8"`` stays itself: :meth:`BiEncoder.runtime_model` applies it)."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_bf16() else "fp32"


def tower_precision(precision: str, device: torch.device) -> str:
    """The precision the towers run inference in: :func:`resolve_precision`'s, except that ``"int8"``
    (ONNX Runtime, static int8) is a CPU path: elsewhere it runs in fp32."""
    resolved = resolve_precision(precision, device)
    return "fp32" if resolved == "int8" and device.type != "cpu" else resolved


def linker_precision(precision: str, device: torch.device) -> str:
    """The precision a linker's towers link in for its ``precision`` setting: ``"auto"`` is bf16 where
    the device has bf16 units, int8 on a CPU without them that has VNNI (about twice fp32's speed at
    the same R@1: benchmarks/int8_static.md), else fp32; other settings are themselves. Building a
    KB or training keeps :func:`resolve_precision`'s ``"auto"`` (stored vectors stay fp32 where bf16 is emulated)."""
    resolved = resolve_precision(precision, device)
    if precision == "auto" and resolved == "fp32" and device.type == "cpu" and cpu_has_vnni():
        return "int8"
    return resolved
