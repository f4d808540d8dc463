"""Int8 towers in torch, activations quantised per row: ``precision = "int8_rows"`` (CPU, inference only).

Every linear layer of a copy of the tower becomes :class:`RowInt8Linear`: its weights int8 with one
scale per output channel, and at each call every input row (one word piece's activations) quantised on
its own, symmetrically (scale = the row's max |x| / 127), before an int8 × int8 → int32 matrix product
(``torch._int_mm``: oneDNN's VNNI kernels on a CPU that has them). A row's result depends on that row
alone, and int32 sums are exact, so a mention's vector does not depend on what is batched with it
(unlike ``"int8_dynamic"``'s per-batch scales), while the product is a real GEMM over the whole batch
(unlike ``"int8"``'s block-wise kernels, tuned for few rows). The rest of the tower (embeddings,
attention scores, layer norms, activations) stays fp32, and span pooling still computes the last layer
at the pooled positions only. Figures: ``benchmarks/int8_rows_nobf16_s51.md`` (linking),
``benchmarks/index_rows_int8rows_s51.md`` (a KB's name rows).

Symmetric rather than asymmetric rows (an offset per row, its term added back through the weights'
sums): vectors a little further from fp32's (mean cosine 0.9979 vs 0.9990 for BC5CDR dev mentions) but
~15% faster, and the elementwise passes around the product are what its time goes to (a pass over the
activations costs about what the int8 product does on 2 cores).
"""
from __future__ import annotations

import copy
import functools

import torch

EPS = 1e-12


@functools.lru_cache(maxsize=None)
def int_mm_available() -> bool:
    """Whether this torch computes exact int8 matrix products on this CPU (``torch._int_mm``; asked once a
    process). Exact is what VNNI gives; without it oneDNN's AVX2 kernels saturate 16-bit pair sums (~17%
    relative error on quantised activations, measured in session 51), so such a CPU has none."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randint(-127, 128, (32, 96), generator=generator, dtype=torch.int8)
    b = torch.randint(-127, 128, (96, 24), generator=generator, dtype=torch.int8)
    try:
        out = torch._int_mm(a, b)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    return torch.equal(out.long(), a.long() @ b.long())


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
        bias = linear.bias.detach().float().clone() if linear.bias is not None else None
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, shape[-1]).float()
        if rows.shape[0] == 0:
            return rows.new_zeros((*shape[:-1], self.out_features))
        # max |x| per row as two reductions (faster than abs() then amax: no [rows, in] temporary)
        scale = torch.maximum(rows.amax(1, keepdim=True), rows.amin(1, keepdim=True).neg_()).clamp_(min=EPS).div_(127.0)
        q = torch.mul(rows, scale.reciprocal()).round_().to(torch.int8)
        out = torch._int_mm(q, self.weight_t).float().mul_(self.weight_scale)
        out = torch.addcmul(self.bias, out, scale) if self.bias is not None else out.mul_(scale)
        return out.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 rows"


def quantize_rows(model: torch.nn.Module) -> torch.nn.Module:
    """An eval-mode copy of ``model`` with every ``torch.nn.Linear`` a :class:`RowInt8Linear` (``model``
    itself is untouched: it stays what is trained and saved)."""
    if not int_mm_available():
        raise RuntimeError(f"precision 'int8_rows' needs exact int8 matrix products on this CPU (torch._int_mm with "
                           f"VNNI); torch {torch.__version__} here has none: use 'int8' or 'fp32'")
    twin = copy.deepcopy(model).eval()
    for module in list(twin.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, child_name, RowInt8Linear(child))
    for p in twin.parameters():
        p.requires_grad_(False)
    return twin
