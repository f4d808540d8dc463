"""A transformer tower run by ONNX Runtime (CPU inference), in fp32 or with int8 matrix products.

The tower (a Hugging Face encoder taking ``input_ids`` and ``attention_mask``) is exported to ONNX in a
temporary folder, its matrix products with weights are quantised or not, and the session is kept in
memory: nothing is written next to the weights, which stay the safetensors files that are trained, saved
and fingerprinted. ``"none"`` keeps fp32: the torch tower's vectors to ~1e-6, 10-17% faster for
encoding a KB on a CPU (benchmarks/onnx_fp32.md). Two quantisations, both using the VNNI int8
instructions that Intel and AMD server CPUs have:

* ``"blockwise"`` (:mod:`.int8_blockwise`): activations quantised per row inside the kernel, so a
  mention's vector does not depend on what is batched with it; R@1 as fp32's, ~1.2× torch fp32's
  pipeline speed (benchmarks/int8_blockwise.md).
* ``"dynamic"`` (ONNX Runtime's ``quantize_dynamic``: int8 weights per output channel, activations
  quantised per batch): the fastest (~1.7× torch fp32 for the pipeline, benchmarks/int8_static.md), but
  a few answers change with the batching.
"""
from __future__ import annotations

import contextlib
import logging
import tempfile
import threading
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import onnx
import onnxruntime
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic

from .int8_blockwise import quantize_blockwise

QUANTIZATIONS = ("blockwise", "dynamic", "none")
INPUTS = ("input_ids", "attention_mask")
OUTPUT = "last_hidden_state"
OPSET = 17


class _LastHidden(torch.nn.Module):
    """The tower with positional inputs and one output, as the exporter wants it."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


_EXPORTING = threading.Lock()  # torch.onnx.export holds process-wide state: one export at a time


def export_tower(model: torch.nn.Module, folder: Path, quantization: str = "blockwise") -> Path:
    """``model`` exported to ONNX (batch and length dynamic) in ``folder``, quantised to int8 unless
    ``quantization`` is ``"none"``."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, not {quantization!r}")
    example = torch.ones((2, 8), dtype=torch.long)
    fp32, int8 = folder / "tower.onnx", folder / "tower.int8.onnx"
    was_training = model.training
    model.eval()
    try:
        with _EXPORTING, warnings.catch_warnings(), torch.no_grad():
            # the TorchScript exporter is deprecated in favour of torch.export's, which needs onnxscript
            # and is slower on these models; its notices are not for our users
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _LastHidden(model), (example, example), str(fp32), input_names=list(INPUTS), output_names=[OUTPUT],
                dynamic_axes={name: {0: "batch", 1: "length"} for name in (*INPUTS, OUTPUT)},
                opset_version=OPSET, dynamo=False,
            )
    finally:
        model.train(was_training)
    if quantization == "none":
        return fp32
    if quantization == "blockwise":
        onnx.save(quantize_blockwise(onnx.load(str(fp32))), str(int8))
        return int8
    with _quiet_root_logger():  # ONNX Runtime's quantiser advises pre-processing on the root logger
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True)
    return int8


@contextlib.contextmanager
def _quiet_root_logger():
    """Drop the root logger's warnings while the block runs (the quantiser's advice is not for our users)."""
    root = logging.getLogger()

    def drop(record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING

    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def cpu_session_options(threads: Optional[int] = None) -> onnxruntime.SessionOptions:
    """ONNX Runtime session options for inference beside torch on the same cores: ``threads`` intra-op
    threads (default: torch's current setting, so the thread settings a user gives torch hold for both),
    one inter-op thread, all graph optimisations, no busy-waiting threads after a call (they would take
    the cores from the torch and Python work that follows), errors only in the log."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return options


class OnnxTower:
    """Inference-only stand-in for a tower: ``tower(input_ids=…, attention_mask=…).last_hidden_state``
    (a float32 torch tensor), computed by ONNX Runtime from a copy of ``model`` made now
    (``quantization``: one of ``QUANTIZATIONS``).

    ``threads``: ONNX Runtime's intra-op threads (default: torch's current setting, so the thread
    settings a user gives torch hold for both).
    """

    def __init__(self, model: torch.nn.Module, threads: Optional[int] = None, quantization: str = "blockwise"):
        self.quantization = quantization
        options = cpu_session_options(threads)
        with tempfile.TemporaryDirectory(prefix="spacy_pel_onnx_") as tmp:
            data = export_tower(model, Path(tmp), quantization).read_bytes()
        self.session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        feeds = {"input_ids": input_ids.cpu().numpy(), "attention_mask": attention_mask.cpu().numpy()}
        hidden = self.session.run([OUTPUT], feeds)[0]
        return SimpleNamespace(last_hidden_state=torch.from_numpy(hidden))
