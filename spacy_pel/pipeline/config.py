"""The settings of ``pel_linker``, checked when the component is made, and the contract of its parts.

The flat settings (:class:`LinkerSettings`) are the component's config block; the parts — where the
mentions come from (:mod:`.mentions`), how their vectors are computed (:mod:`.vectors`) and the
candidate rules (:mod:`.rules`) — are registered functions chosen in the same block. The config is
the one source of truth for settings: a saved pipeline's folder holds only weights and data.

A part that holds data of its own (the span scorer, the alias counts) is a :class:`LinkerPart`: it
is set up when the linker gets its encoder and KB, saves its files into the component's folder and
reads them back, under a ``data_name`` that ``exclude`` can name.
"""
from __future__ import annotations

import math
import numbers
import re
import warnings
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Optional

import numpy as np

from ..corpora import NIL
from ..models.encoder import PRECISIONS, BiEncoder
from ..models.precision import SEARCH_PRECISIONS, device_problem
from ..retrieval.index import EntityIndex

MIN_CONTEXT = 8  # the smallest word-piece budget an encoder takes (EncoderConfig)
MAX_CONTEXT = 512  # BERT-style position tables; checked against the encoder itself when it is loaded
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def _is_int(value) -> bool:  # numbers.Integral: numpy's integers too (np.int64 from an array)
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _is_number(value) -> bool:  # numbers.Real: numpy's floats too (np.float32 from a score array)
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)


def _path(value, name: str) -> Optional[str]:
    if value is None or isinstance(value, (str, Path)):
        return None if value is None or str(value) == "" else str(value)
    raise ValueError(f"pel_linker: `{name}` must be a path or null, not {value!r}")


def check_probability(value, name: str) -> Optional[float]:
    """``value`` as a float in [0, 1], or None."""
    if value is None:
        return None
    if not _is_number(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"pel_linker: `{name}` must be a probability in [0, 1] or null, not {value!r}")
    return float(value)


@dataclass(frozen=True)
class LinkerSettings:
    """The flat settings of ``pel_linker`` (see the README's table); invalid values raise ValueError.

    kb: KB folder from ``build_kb`` (loaded on first use, unless the pipeline already holds one).
    encoder: encoder folder or model name; null: the one the pipeline holds, else the KB's own.
    top_k: candidates kept per mention. threshold: best score below it → ``nil_label`` (null: never).
    batch_size: mentions per forward pass (documents per pass: batch_size // 8, at least 1).
    context_window: word pieces of a mention input. device: ``auto``, ``cpu``, ``cuda[:N]`` or ``mps``.
    precision: the encoder's inference precision, ``fp32``, ``bf16``, ``int8_rows``, ``int8``,
    ``int8_dynamic``, ``onnx_fp32`` or ``auto`` (bf16 where the device has bf16 units — BC5CDR dev R@1
    unchanged, ~3× faster on such CPUs — else ``int8_rows`` on x86 CPUs (VNNI or AVX2), else fp32).
    ``int8_rows`` (CPU): torch's int8 products, weights per output channel, activations quantised per row, so no
    answer depends on batching; R@1 as fp32's. ``int8`` (CPU): the same idea in ONNX Runtime's block-wise
    kernels (slower for a batch's many rows). ``int8_dynamic`` (CPU): activations quantised per batch —
    a few answers depend on what was batched together.
    search_precision: the KB search's, ``fp32``, ``bf16``, ``int8`` or ``auto`` (bf16 where the CPU has bf16
    units, else int8 on CPUs with VNNI, else fp32). ``int8``: each mention's best rows found by int8
    products, then rescored exactly from the KB's float16 vectors (the same kb_ids as fp32).
    use_gold_ents: as spaCy's ``entity_linker``: scoring (``nlp.evaluate``, ``spacy evaluate``) links
    the reference's own mentions, and ``update`` learns from them; false: the predicted ones (from an
    NER before it), scored where their offsets match a gold mention.
    """

    kb: Optional[str] = None
    encoder: Optional[str] = None
    top_k: int = 10
    threshold: Optional[float] = None
    nil_label: str = NIL
    batch_size: int = 64
    context_window: int = 128
    device: str = "auto"
    precision: str = "auto"
    search_precision: str = "auto"
    use_gold_ents: bool = True

    def __post_init__(self):
        object.__setattr__(self, "kb", _path(self.kb, "kb"))
        object.__setattr__(self, "encoder", _path(self.encoder, "encoder"))
        for name in ("top_k", "batch_size"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ValueError(f"pel_linker: `{name}` must be an integer ≥ 1, not {value!r}")
            object.__setattr__(self, name, int(value))
        if self.threshold is not None:
            if not _is_number(self.threshold):
                raise ValueError(f"pel_linker: `threshold` must be a finite number or null, not {self.threshold!r}")
            object.__setattr__(self, "threshold", float(self.threshold))
        if not isinstance(self.nil_label, str) or not self.nil_label.strip():
            raise ValueError(f"pel_linker: `nil_label` must be a non-empty string, not {self.nil_label!r}")
        cw = self.context_window
        if not _is_int(cw) or not MIN_CONTEXT <= cw <= MAX_CONTEXT:
            raise ValueError(f"pel_linker: `context_window` must be an integer in {MIN_CONTEXT}..{MAX_CONTEXT} word pieces, not {cw!r}")
        object.__setattr__(self, "context_window", int(cw))
        if not isinstance(self.device, str) or not _DEVICE.fullmatch(self.device):
            raise ValueError(f"pel_linker: unknown `device` {self.device!r}; use auto, cpu, cuda, cuda:N or mps")
        problem = device_problem(self.device)
        if problem:
            raise ValueError(f"pel_linker: `device` {problem}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"pel_linker: `precision` must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if self.search_precision not in SEARCH_PRECISIONS:
            raise ValueError(f"pel_linker: `search_precision` must be one of {', '.join(SEARCH_PRECISIONS)}, "
                             f"not {self.search_precision!r}")
        if not isinstance(self.use_gold_ents, bool):
            raise ValueError(f"pel_linker: `use_gold_ents` must be true or false, not {self.use_gold_ents!r}")

    def replace(self, **changes) -> "LinkerSettings":
        """A copy with ``changes`` applied (and checked)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"pel_linker has no setting(s) {sorted(unknown)}; settings: {[f.name for f in fields(self)]}")
        return replace(self, **changes)

    def as_config(self) -> dict:
        return asdict(self)

    def check_encoder(self, encoder: BiEncoder) -> None:
        """The context window must fit the mention transformer's position table."""
        limit = int(getattr(encoder.mention_model.config, "max_position_embeddings", MAX_CONTEXT))
        if self.context_window > limit:
            raise ValueError(f"pel_linker: `context_window` {self.context_window} exceeds the encoder's {limit} positions")


def warn_unsaved(setting: str) -> None:
    """A setting changed on the component alone: ``nlp.to_disk`` writes ``nlp.config``, which still holds the old value."""
    warnings.warn(f"pel_linker.{setting} set on the component only: nlp.to_disk saves the config's value; "
                  f"spacy_pel.pipeline.linker.configure_linker(nlp, {setting}=…) changes both", UserWarning, stacklevel=3)


class LinkerPart:
    """A part of the linker that holds data: set up with the linker's encoder and KB, saved in the
    component's folder (its files are excluded by ``exclude=[data_name]``).

    ``source`` is the configured path the data comes from; when a saved pipeline is loaded with
    another ``source`` in its config, the part reads that path instead of its saved copy — and with
    ``source`` null, a part whose ``null_turns_off`` is set (the alias table's training surface forms)
    reads nothing, so ``aliases = null`` at ``spacy.load(config=…)`` turns them off; the others
    (name rows, span models) keep their saved copy.
    """

    data_name: str = ""
    source: Optional[str] = None
    null_turns_off: bool = False

    def setup(self, encoder: BiEncoder, index: EntityIndex) -> None:
        """Called whenever the linker gets (new) resources; loads ``source`` if nothing is held."""

    def to_disk(self, path: Path) -> bool:
        """Write what the part holds into ``path`` (the component's folder); False if nothing."""
        return False

    def from_disk(self, path: Path) -> bool:
        """Read the part's files from ``path``; False if there are none."""
        return False
