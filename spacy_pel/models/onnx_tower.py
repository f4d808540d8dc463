"""A transformer tower run by ONNX Runtime with statically quantised int8 matrix products (CPU inference).

The tower (a Hugging Face encoder taking ``input_ids`` and ``attention_mask``) is exported to ONNX in a
temporary folder and its matrix products are quantised: int8 weights with one scale per output
channel, and uint8 activations whose ranges are measured once, on fixed calibration inputs
(:mod:`spacy_pel.models.int8_calibration`), and then kept. Each token's activations are thus
quantised on their own: a mention's vector does not depend on what it is batched with (ONNX
Runtime's dynamic quantisation measures each batch's range as it runs, so it did). The session is
kept in memory: nothing is written next to the weights, which stay the safetensors files that are
trained, saved and fingerprinted. It uses the VNNI int8 instructions that both Intel and AMD server
CPUs have (benchmarks/int8_static.md has its speed and R@1 against fp32, bf16 and dynamic int8).
"""
from __future__ import annotations

import contextlib
import logging
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, Iterator, List, Optional, Sequence

import numpy as np
import onnxruntime
import torch
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

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


class _Inputs(CalibrationDataReader):
    """The calibration inputs for the quantiser, batched by length: sequences of one length together, so
    no padding enters the ranges."""

    def __init__(self, sequences: Sequence[List[int]], batch_size: int = 64):
        by_length: Dict[int, List[List[int]]] = {}
        for seq in sequences:
            by_length.setdefault(len(seq), []).append(seq)
        self.feeds: Iterator[dict] = (
            {"input_ids": np.array(group[i : i + batch_size], np.int64),
             "attention_mask": np.ones((len(group[i : i + batch_size]), length), np.int64)}
            for length, group in sorted(by_length.items()) for i in range(0, len(group), batch_size)
        )

    def get_next(self) -> Optional[dict]:
        return next(self.feeds, None)


def export_int8(model: torch.nn.Module, folder: Path, calibration: Sequence[List[int]]) -> Path:
    """``model`` exported to ONNX (batch and length dynamic) and quantised to int8 in ``folder``, its
    activation ranges measured on ``calibration`` (word-piece id sequences)."""
    if not calibration:
        raise ValueError("int8 quantisation needs calibration inputs")
    example = torch.ones((2, 8), dtype=torch.long)
    fp32, int8 = folder / "tower.onnx", folder / "tower.int8.onnx"
    was_training = model.training
    model.eval()
    try:
        with warnings.catch_warnings(), torch.no_grad():
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
    with _quiet_root_logger():  # ONNX Runtime's quantiser advises pre-processing on the root logger
        quantize_static(str(fp32), str(int8), _Inputs(calibration), quant_format=QuantFormat.QOperator,
                        op_types_to_quantize=["MatMul"], per_channel=True, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"ActivationSymmetric": False})
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


class OnnxTower:
    """Inference-only stand-in for a tower: ``tower(input_ids=…, attention_mask=…).last_hidden_state``
    (a float32 torch tensor), computed by ONNX Runtime from an int8 copy of ``model`` made now, its
    activation ranges measured on ``calibration`` (word-piece id sequences in the form the tower reads).

    ``threads``: ONNX Runtime's intra-op threads (default: torch's current setting, so the thread
    settings a user gives torch hold for both).
    """

    def __init__(self, model: torch.nn.Module, calibration: Sequence[List[int]], threads: Optional[int] = None):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only
        with tempfile.TemporaryDirectory(prefix="spacy_pel_onnx_") as tmp:
            data = export_int8(model, Path(tmp), calibration).read_bytes()
        self.session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        feeds = {"input_ids": input_ids.cpu().numpy(), "attention_mask": attention_mask.cpu().numpy()}
        hidden = self.session.run([OUTPUT], feeds)[0]
        return SimpleNamespace(last_hidden_state=torch.from_numpy(hidden))
