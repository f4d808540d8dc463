"""Int8 towers in torch, activations quantised per row: ``precision = "int8_rows"`` (CPU, inference only).

Every linear layer of a copy of the tower becomes :class:`RowInt8Linear`: its weights int8 with one
scale per output channel, and at each call every input row (one word piece's activations) quantised on
its own, symmetrically (scale = the row's max |x| / 127), before an int8 × int8 → int32 matrix product
(``torch._int_mm``: oneDNN's VNNI kernels on a CPU that has them; on AVX2 alone its kernels are exact
only with 7-bit weights, which the copy then takes: :func:`int_mm_weight_limit`, figures in
``benchmarks/int8_rows_avx2_s52.md``). A row's result depends on that row
alone, and int32 sums are exact, so a mention's vector does not depend on what is batched with it
(unlike ``"int8_dynamic"``'s per-batch scales), while the product is a real GEMM over the whole batch
(unlike ``"int8"``'s block-wise kernels, tuned for few rows). The rest of the tower (embeddings,
attention scores, layer norms, activations) stays fp32, and span pooling still computes the last layer
at the pooled positions only. Figures: ``benchmarks/int8_rows_nobf16_s51.md`` (linking),
``benchmarks/index_rows_int8rows_s51.md`` (a KB's name rows). Query, key and value read the same input,
which is quantised once (:class:`RowQuantiser`).

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


# the widest int8 weights whose products torch computes exactly here, widest first: 127 with VNNI; 64 on
# AVX2 alone, whose kernels add 128 to the activations (u8) and sum pairs of u8 × s8 products in 16 bits,
# exact while 2 × 255 × |w| ≤ 32,767 (FBGEMM's "reduce_range" for the same reason)
WEIGHT_LIMITS = (127, 64)


def _exact_at(limit: int) -> bool:
    generator = torch.Generator().manual_seed(0)
    a = torch.randint(-127, 128, (32, 96), generator=generator, dtype=torch.int8)
    b = torch.randint(-limit, limit + 1, (96, 24), generator=generator, dtype=torch.int8)
    a[0], a[1], b[:, 0], b[:, 1] = 127, -127, limit, -limit  # the pair sums' extremes
    try:
        out = torch._int_mm(a, b)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    return torch.equal(out.long(), a.long() @ b.long())


@functools.lru_cache(maxsize=None)
def int_mm_weight_limit() -> int:
    """The widest weight range (±limit) at which this torch computes exact int8 matrix products on this CPU
    (``torch._int_mm``; asked once a process): 127 with VNNI, 64 on AVX2 alone (full-range weights there
    saturate 16-bit pair sums: ~17% relative error, measured in session 51), 0 where there is none."""
    return next((limit for limit in WEIGHT_LIMITS if _exact_at(limit)), 0)


def int_mm_available() -> bool:
    """Whether this torch computes exact int8 matrix products on this CPU, at some weight range."""
    return int_mm_weight_limit() > 0


class RowQuantiser:
    """Quantises activations per row, remembering the last input: attention's query, key and value layers
    read the same tensor, which is then quantised once, not three times (one ``RowQuantiser`` is shared by
    every layer of a copy and forgotten at each call of the copy; an input changed in place since is
    quantised afresh, where torch tracks that: inference-mode tensors have no version counter)."""

    def __init__(self):
        self._last: tuple | None = None

    def forget(self, *_) -> None:
        self._last = None

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        last, version = self._last, None if x.is_inference() else x._version
        if last is not None and last[0] is x and last[1] == version:
            return last[2], last[3]
        rows = x.reshape(-1, x.shape[-1]).float()
        # max |x| per row as two reductions (faster than abs() then amax: no [rows, in] temporary)
        scale = torch.maximum(rows.amax(1, keepdim=True), rows.amin(1, keepdim=True).neg_()).clamp_(min=EPS).div_(127.0)
        q = torch.mul(rows, scale.reciprocal()).round_().to(torch.int8)
        self._last = (x, version, q, scale)
        return q, scale


class RowInt8Linear(torch.nn.Module):
    """``linear`` with int8 weights (per output channel, in ±``weight_limit``: 127, or 64 where this CPU
    multiplies only 7-bit weights exactly — :func:`quantize_rows` picks it) and int8 activations (per input
    row, by ``quantiser``, which the layers of one copy share)."""

    def __init__(self, linear: torch.nn.Linear, weight_limit: int = 127, quantiser: RowQuantiser | None = None):
        super().__init__()
        self.quantiser = quantiser if quantiser is not None else RowQuantiser()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(1).clamp(min=EPS) / weight_limit
        quantised = torch.round(weight / scale[:, None]).clamp(-weight_limit, weight_limit).to(torch.int8)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_t", quantised.t())  # [in, out], the layout _int_mm reads fastest
        self.register_buffer("weight_scale", scale)
        # the bias over the weights' scales: (q·w + bias / w_scale) · w_scale is one mixed-dtype pass fewer
        bias = linear.bias.detach().float() / scale if linear.bias is not None else None
        self.register_buffer("bias_unscaled", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        if x.numel() == 0:
            return x.new_zeros((*shape[:-1], self.out_features), dtype=torch.float32)
        q, scale = self.quantiser(x)
        products = torch._int_mm(q, self.weight_t)  # int32, exact
        if self.bias_unscaled is not None:
            out = torch.addcmul(self.bias_unscaled, products, scale).mul_(self.weight_scale)
        else:
            out = torch.mul(products, scale).mul_(self.weight_scale)
        return out.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 rows"


def quantize_rows(model: torch.nn.Module, weight_limit: int | None = None) -> torch.nn.Module:
    """An eval-mode copy of ``model`` with every ``torch.nn.Linear`` a :class:`RowInt8Linear` (``model``
    itself is untouched: it stays what is trained and saved); weights at ±``weight_limit``, by default the
    widest this CPU multiplies exactly (:func:`int_mm_weight_limit`)."""
    weight_limit = int_mm_weight_limit() if weight_limit is None else weight_limit
    if not weight_limit:
        raise RuntimeError(f"precision 'int8_rows' needs exact int8 matrix products on this CPU (torch._int_mm with "
                           f"VNNI or AVX2); torch {torch.__version__} here has none: use 'int8' or 'fp32'")
    twin, quantiser = copy.deepcopy(model).eval(), RowQuantiser()
    for module in list(twin.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, child_name, RowInt8Linear(child, weight_limit, quantiser))
    twin.register_forward_pre_hook(quantiser.forget)
    for p in twin.parameters():
        p.requires_grad_(False)
    return twin
