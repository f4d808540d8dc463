"""Int8 towers in torch, activations quantised per row: ``precision = "int8_rows"`` (CPU, inference only).

Every linear layer of a copy of the tower becomes :class:`RowInt8Linear`: its weights int8 with one
scale per output channel, and at each call every input row (one word piece's activations) quantised on
its own — an offset (the row's mid-range) and a scale spanning its range in 255 steps — before an
int8 × int8 → int32 matrix product (``torch._int_mm``: oneDNN's VNNI kernels on a CPU that has them).
A row's result depends on that row alone, and int32 sums are exact, so a mention's vector does not
depend on what is batched with it (unlike ``"int8_dynamic"``'s per-batch scales), while the product is
a real GEMM over the whole batch (unlike ``"int8"``'s block-wise kernels, tuned for few rows). The rest
of the tower (embeddings, attention scores, layer norms, activations) stays fp32, and span pooling
still computes the last layer at the pooled positions only. Figures: ``benchmarks/int8_rows.md``.

The offset is what keeps 8 bits of resolution for one-signed inputs (the feed-forward output after
GELU): ``x ≈ scale · q + offset`` gives ``x · Wᵀ ≈ scale · (q · W_qᵀ) · w_scale + offset · Σ_k W[n, k]``.
"""
from __future__ import annotations

import copy

import torch

EPS = 1e-12


def int_mm_available() -> bool:
    """Whether this torch computes int8 matrix products on a CPU (``torch._int_mm``, torch ≥ 2.3 or so)."""
    try:
        out = torch._int_mm(torch.ones((2, 8), dtype=torch.int8), torch.ones((8, 2), dtype=torch.int8))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    return bool((out == 8).all())


class RowInt8Linear(torch.nn.Module):
    """``linear`` with int8 weights (per output channel) and int8 activations (per input row)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(1).clamp(min=EPS) / 127.0
        quantised = torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_t", quantised.t())  # [in, out], the layout _int_mm reads fastest
        self.register_buffer("weight_scale", scale)
        # Σ_k of each output channel's dequantised weights: what a row's offset adds to that channel
        self.register_buffer("weight_sums", (quantised.float() * scale[:, None]).sum(1))
        bias = linear.bias.detach().float().clone() if linear.bias is not None else None
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, shape[-1]).float()
        if rows.shape[0] == 0:
            return rows.new_zeros((*shape[:-1], self.out_features))
        scale = rows.abs().amax(1, keepdim=True).clamp_(min=EPS).div_(127.0)
        q = torch.mul(rows, scale.reciprocal()).round_().to(torch.int8)
        out = torch._int_mm(q, self.weight_t).float().mul_(self.weight_scale)
        out = torch.addcmul(self.bias, out, scale) if self.bias is not None else out.mul_(scale)
        return out.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 rows"


def quantize_rows(model: torch.nn.Module) -> torch.nn.Module:
    """An eval-mode copy of ``model`` with every ``torch.nn.Linear`` a :class:`RowInt8Linear` (``model``
    itself is untouched: it stays what is trained and saved)."""
    twin = copy.deepcopy(model).eval()
    for name, module in list(twin.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, child_name, RowInt8Linear(child))
    for p in twin.parameters():
        p.requires_grad_(False)
    return twin
