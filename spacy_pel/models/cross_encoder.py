"""The cross-encoder re-ranker: a mention in its context and one candidate entity in one input.

Input: ``[CLS] left-context [M_s] mention [M_e] right-context [SEP] name [SEP] types [SEP]
synonyms [SEP]`` — the mention side is built exactly as the bi-encoder builds it
(:func:`~spacy_pel.models.encoder.marked_mentions`, ``mention_max_length`` pieces, segment 0), the
entity side as the bi-encoder's entity input without its ``[CLS]`` (``entity_max_length`` pieces,
segment 1). One transformer reads the pair; the attention-masked mean (``pooling = "mean"``, as
the PEL paper's re-ranker) or the ``[CLS]`` state (``"cls"``) goes through a linear layer to one
score (a logit; the scores of one mention's candidates are compared by softmax, as trained).

A saved cross-encoder is a folder::

    pel_cross_encoder.json   settings (this module's CrossEncoderConfig)
    tokenizer/               the tokenizer, with the [M_s]/[M_e] markers
    model/                   the transformer, weights in safetensors
    head.safetensors         the linear score layer

``precision = "int8"`` (CPU, inference only): the linear layers run as a dynamically quantised int8
copy (per-channel weights), made on first use; the fp32 weights stay what is trained and saved.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
from transformers import AutoTokenizer

from ..files import InputError, atomic_dir
from ..kb import Entity
from .encoder import (
    DEFAULT_ENCODER,
    MENTION_END,
    MENTION_START,
    marker_tokenizer,
    mean_pool,
    quiet_transformers,
    resolve_model_name,
    versioned_copy,
)
from .hub import load_safetensors_model
from .pieces import ENTITY_TEXTS, Mention, check_entity_text, entity_pieces, entity_text_fields, marked_mentions
from .precision import pick_device
from .saved_settings import SAVED_BEFORE

PathLike = Union[str, Path]
CONFIG_FILE = "pel_cross_encoder.json"
HEAD_FILE = "head.safetensors"
CROSS_PRECISIONS = ("fp32", "int8")
ENTITY_CACHE = 200_000  # entity inputs kept tokenised (cleared when full)


@dataclass
class CrossEncoderConfig:
    base: str = DEFAULT_ENCODER
    mention_max_length: int = 64  # word pieces of the mention side (with [CLS], markers and [SEP])
    entity_max_length: int = 32  # word pieces of the entity side (name, types, synonyms, 3 [SEP])
    pooling: str = "mean"  # "mean" (attention-masked, the paper's) or "cls"
    precision: str = "fp32"  # inference: "fp32" or "int8" (CPU dynamic quantisation)
    entity_text: str = ENTITY_TEXTS[0]  # the entity side's third part, as the bi-encoder's (pieces.entity_text_fields)

    def __post_init__(self):
        check_entity_text(self.entity_text)
        if self.pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', not {self.pooling!r}")
        if self.precision not in CROSS_PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(CROSS_PRECISIONS)}, not {self.precision!r}")
        if self.mention_max_length < 8 or self.entity_max_length < 8:
            raise ValueError("word-piece budgets must be at least 8")


def _quantised(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose linear layers are dynamically quantised (int8 weights per channel)."""
    with warnings.catch_warnings():  # torch's notice that its quantised tensor types will move
        warnings.simplefilter("ignore", UserWarning)
        return quantize_dynamic(model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)


class CrossEncoder(torch.nn.Module):
    def __init__(self, model, tokenizer, config: CrossEncoderConfig, head: Optional[torch.nn.Linear] = None):
        super().__init__()
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.head = head if head is not None else torch.nn.Linear(int(model.config.hidden_size), 1)
        self.marker_ids = tokenizer.convert_tokens_to_ids([MENTION_START, MENTION_END])
        self.device_ = torch.device("cpu")
        self._int8: Dict[str, Tuple[int, torch.nn.Module]] = {}  # (weights version, int8 copy); a dict: not a submodule
        self._entity_cache: Dict[str, List[int]] = {}
        self.eval()  # inference unless a trainer says otherwise

    # ---------------------------------------------------------------- loading and saving
    @classmethod
    def from_pretrained(cls, name_or_path: PathLike = DEFAULT_ENCODER, **overrides) -> "CrossEncoder":
        """Load a saved cross-encoder folder, or start one (random score layer) from a Hugging Face
        model name or path. ``overrides`` set :class:`CrossEncoderConfig` fields."""
        quiet_transformers()
        path = Path(str(name_or_path)).expanduser()
        known = {f.name for f in fields(CrossEncoderConfig)}
        if set(overrides) - known:  # a mistyped setting, refused for a saved folder as for a new model
            raise ValueError(f"unknown cross-encoder setting(s) {', '.join(sorted(set(overrides) - known))}; "
                             f"the settings are {', '.join(sorted(known))}")
        if (path / CONFIG_FILE).exists():
            # a setting the file lacks reads as what it did when saved (entity_text: descriptions first)
            data = {**SAVED_BEFORE, **json.loads((path / CONFIG_FILE).read_text(encoding="utf8"))}
            if set(data) - known:  # another version's setting, which may change the inputs: never dropped silently
                raise InputError(f"{path / CONFIG_FILE}: setting(s) {', '.join(sorted(set(data) - known))} unknown to this "
                                 "version of spacy_pel (the re-ranker was saved by another version); load it with that version")
            data.update(overrides)
            config = CrossEncoderConfig(**data)
            kw = {"local_files_only": True}
            tokenizer = AutoTokenizer.from_pretrained(path / "tokenizer", **kw)
            model = load_safetensors_model(str(path / "model"), add_pooling_layer=False, **kw)  # never unpickled
            weights = load_file(str(path / HEAD_FILE))
            head = torch.nn.Linear(weights["weight"].shape[1], 1)
            head.load_state_dict(weights)
            return cls(model, tokenizer, config, head)
        config = CrossEncoderConfig(base=str(name_or_path), **overrides)
        source = resolve_model_name(str(name_or_path))
        tokenizer = marker_tokenizer(source, str(name_or_path))
        model = load_safetensors_model(source, add_pooling_layer=False)
        model.resize_token_embeddings(len(tokenizer))
        return cls(model, tokenizer, config)

    def save(self, path: PathLike) -> None:
        """Write the folder atomically (safetensors weights, tokenizer, JSON settings)."""
        with atomic_dir(path) as tmp:
            self.write(tmp)

    def write(self, folder: Path) -> None:
        """Write the folder's files into ``folder`` (an existing, empty folder)."""
        quiet_transformers()
        self.tokenizer.save_pretrained(folder / "tokenizer")
        self.model.save_pretrained(folder / "model", safe_serialization=True)
        save_file({k: v.detach().contiguous().cpu() for k, v in self.head.state_dict().items()}, str(folder / HEAD_FILE))
        (folder / CONFIG_FILE).write_text(json.dumps(asdict(self.config), indent=2), encoding="utf8")

    def to_device(self, device: str = "auto") -> "CrossEncoder":
        self.device_ = pick_device(device)
        return self.to(self.device_)

    # ---------------------------------------------------------------- inputs
    def mention_sides(self, mentions: Sequence[Mention]) -> List[List[int]]:
        """The mention side of each pair: ``[CLS] left [M_s] mention [M_e] right [SEP]``."""
        if not mentions:
            return []
        return [seq for seq, _ in marked_mentions(self.tokenizer, self.marker_ids, mentions, self.config.mention_max_length)]

    def entity_sides(self, entities: Sequence[Entity]) -> List[List[int]]:
        """The entity side of each pair: ``name [SEP] types [SEP] extra text [SEP]`` (cached by id)."""
        missing = list({e.id: e for e in entities if e.id not in self._entity_cache}.values())
        if missing:
            if len(self._entity_cache) + len(missing) > ENTITY_CACHE:
                self._entity_cache.clear()
            texts = [entity_text_fields(e, self.config.entity_text) for e in missing]
            for e, seq in zip(missing, entity_pieces(self.tokenizer, texts, self.config.entity_max_length + 1)):
                self._entity_cache[e.id] = seq[1:]  # without [CLS]
        return [self._entity_cache[e.id] for e in entities]

    def pair_inputs(self, mention_side: List[int], entity_sides: Sequence[List[int]]) -> List[Tuple[List[int], int]]:
        """``(ids, length of the mention side)`` of one mention paired with each entity side."""
        return [(mention_side + e, len(mention_side)) for e in entity_sides]

    def _collate(self, pairs: Sequence[Tuple[List[int], int]]):
        width = max(len(s) for s, _ in pairs)
        ids = torch.full((len(pairs), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(pairs), width), dtype=torch.long)
        types = torch.zeros((len(pairs), width), dtype=torch.long)
        for row, (s, first) in enumerate(pairs):
            ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[row, : len(s)] = 1
            types[row, first : len(s)] = 1
        return ids.to(self.device_), mask.to(self.device_), types.to(self.device_)

    # ---------------------------------------------------------------- scoring
    def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        hidden = self.model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        pooled = hidden[:, 0] if self.config.pooling == "cls" else mean_pool(hidden, mask)
        return self.head(pooled).squeeze(-1).float()

    def runtime(self) -> torch.nn.Module:
        """What inference runs: this module, or with ``precision="int8"`` on a CPU and no gradient
        wanted, a copy whose linear layers are dynamically quantised (int8 weights per channel), made
        on first use and again whenever the weights have changed since (as the bi-encoder's)."""
        if torch.is_grad_enabled() or self.device_.type != "cpu" or self.config.precision != "int8":
            return self
        return versioned_copy(self._int8, "int8", self, _quantised)

    def score(self, pairs: Sequence[Tuple[List[int], int]]) -> torch.Tensor:
        """Scores (logits) of one batch of pairs, keeping the graph (training uses it)."""
        return self.runtime()(*self._collate(pairs))

    def score_lists(self, pairs: Sequence[Tuple[List[int], int]], batch_size: int = 128) -> np.ndarray:
        """Scores of many pairs (float32, input order), length-sorted batches, no gradient."""
        out = np.zeros(len(pairs), dtype=np.float32)
        if not pairs:
            return out
        order = np.argsort(-np.asarray([len(s) for s, _ in pairs]), kind="stable")
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode():
                for i in range(0, len(pairs), batch_size):
                    idx = order[i : i + batch_size]
                    out[idx] = self.score([pairs[j] for j in idx]).cpu().numpy()
        finally:
            self.train(was_training)
        return out

    def score_candidates(
        self, mentions: Sequence[Mention], candidates: Sequence[Sequence[Entity]], batch_size: int = 128
    ) -> List[np.ndarray]:
        """Per mention, the scores of its candidate entities (input order)."""
        sides = self.mention_sides(mentions)
        pairs, bounds = [], [0]
        for side, ents in zip(sides, candidates):
            pairs.extend(self.pair_inputs(side, self.entity_sides(ents)))
            bounds.append(len(pairs))
        flat = self.score_lists(pairs, batch_size)
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
