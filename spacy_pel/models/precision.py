"""Where and in which precision the towers run: the device (``"auto"``: CUDA when present), and
``"auto"`` precision resolved to bf16 where the hardware computes it natively (a CUDA device with bf16,
a CPU with ``avx512_bf16`` / ``amx_bf16``), else fp32; ``"int8"`` is ONNX Runtime's dynamic int8, a CPU
path (:mod:`spacy_pel.models.onnx_tower`).
"""
from __future__ import annotations

from pathlib import Path

import torch

PRECISIONS = ("fp32", "bf16", "int8", "auto")
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (Linux ``/proc/cpuinfo`` flags; False elsewhere).

    Without such units bf16 matrix products are emulated and slower than fp32."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf8", errors="replace")
    except OSError:
        return False
    return any(flag in flags.split() for flag in BF16_CPU_FLAGS)


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
    (ONNX Runtime, dynamic int8) is a CPU path: elsewhere it runs in fp32.

    ``"auto"`` does not choose int8, although it measured about twice as fast as bf16 at the same
    R@1 (benchmarks/speed.md): dynamic int8 quantises activations per batch, so a mention's vector
    depends slightly on the mentions batched with it, and a default should give the same answer for
    the same text however it is batched."""
    resolved = resolve_precision(precision, device)
    return "fp32" if resolved == "int8" and device.type != "cpu" else resolved
