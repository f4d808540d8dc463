"""Further span models beside the span finder's first one: their probabilities are averaged with its.

``spacy_pel.mentions.span_finder.v1`` takes ``model`` as one ``train_e2e`` folder or a list of them
(the same corpus, other seeds); every span of a document gets the mean of the models' probabilities,
and γ, the labels and the label map come from the first model. Each further model runs its own
transformer pass per document, so finding costs about one pass per model. NCBI disease dev, two
seeds: strict F1 0.793 / 0.784 alone, 0.798 averaged (``benchmarks/span_ensemble_ncbi.md``).

A member is an ``(encoder, scorer)`` pair; saved inside the pipeline's component folder as
``span_members/<i>/`` (the encoder folder with its ``span_scorer.safetensors``) beside
``span_members.json``, the list of folders they came from: a pipeline loads its saved members when
its config names the same folders, else it reads the config's.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
import srsly
import torch

from ..models.encoder import BiEncoder
from ..models.span_scorer import SCORER_FILE, SpanScorer, load_span_scorer, save_span_scorer

MEMBERS_DIR = "span_members"
MEMBERS_FILE = "span_members.json"
Member = Tuple[BiEncoder, SpanScorer]


def model_sources(model, name: str = "spacy_pel.mentions.span_finder.v1") -> List[str]:
    """``model`` as a list of folders: a path, a list of paths, or null (none)."""
    if model is None:
        return []
    models = [model] if isinstance(model, (str, Path)) else model
    if not isinstance(models, (list, tuple)) or not models or not all(isinstance(m, (str, Path)) and str(m) for m in models):
        raise ValueError(f"{name}: `model` must be a train_e2e folder or a list of them, not {model!r}")
    return [str(m) for m in models]


def load_member(source: str) -> Member:
    """A ``train_e2e`` folder's transformer and span scorer."""
    return BiEncoder.from_pretrained(source), load_span_scorer(Path(source) / SCORER_FILE)


def place_members(members: Sequence[Member], like: BiEncoder, sources: Sequence[str]) -> None:
    """Run the members as ``like`` runs (precision, device); each scorer must fit its transformer."""
    for (encoder, scorer), source in zip(members, sources):
        if scorer.hidden_size != int(encoder.mention_model.config.hidden_size):
            raise ValueError(f"span model {source}: its scorer expects vectors of size {scorer.hidden_size}, "
                             f"its transformer gives {int(encoder.mention_model.config.hidden_size)}")
        encoder.config.precision = like.config.precision
        encoder.to_device(str(like.device_))
        scorer.to(like.device_)


def save_members(members: Sequence[Member], sources: Sequence[str], path: Path) -> None:
    for i, (encoder, scorer) in enumerate(members, 1):
        encoder.save(path / MEMBERS_DIR / str(i))
        save_span_scorer(scorer, path / MEMBERS_DIR / str(i) / SCORER_FILE)
    if members:
        srsly.write_json(path / MEMBERS_FILE, list(sources))


def read_members(path: Path, sources: Sequence[str]) -> Optional[List[Member]]:
    """The members saved in ``path`` if they came from ``sources`` (else None: the config's are read)."""
    saved = srsly.read_json(path / MEMBERS_FILE) if (path / MEMBERS_FILE).exists() else None
    if not sources or saved != list(sources):
        return None
    return [load_member(str(path / MEMBERS_DIR / str(i))) for i in range(1, len(sources) + 1)]


def mean_probs(first: np.ndarray, members: Sequence[Member], hidden: Sequence[Sequence[torch.Tensor]], k: int,
               starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The first model's span probabilities of doc ``k`` averaged with each member's (``hidden[m][k]``:
    member m's token vectors of that doc)."""
    if not members:
        return first
    total = first.astype(np.float64)
    for (_, scorer), H in zip(members, hidden):
        total = total + scorer.probs(H[k], starts, ends).detach().float().cpu().numpy()
    return (total / (1 + len(members))).astype(first.dtype)
