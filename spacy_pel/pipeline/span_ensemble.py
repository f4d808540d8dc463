"""Further span models beside the span finder's first one: their probabilities are averaged with its.

``spacy_pel.mentions.span_finder.v1`` takes ``model`` as one ``train_e2e`` folder or a list of them
(the same corpus, other seeds); every span of a document gets the mean of the models' probabilities,
and γ, the labels and the label map come from the first model. Each further model runs its own
transformer pass per document, so finding costs about one pass per model. NCBI disease dev, two
seeds: strict F1 0.793 / 0.784 alone, 0.798 averaged (``benchmarks/span_ensemble_ncbi.md``).

``python -m spacy_pel train-e2e … --seeds N`` trains N span models into one output folder and lists
their ``best`` folders in its ``span_models.json``; ``model`` may name such a folder (or list several):
it stands for the models it lists.

A member is an ``(encoder, scorer)`` pair; saved inside the pipeline's component folder as
``span_members/<i>/`` (the encoder folder with its ``span_scorer.safetensors``) beside
``span_members.json``: the config's ``model`` and the folders the members came from. A pipeline loads
its saved members when its config's ``model`` is the one they were saved with (the folders need not
exist any more), else it reads the config's.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import numpy as np
import srsly
import torch

from ..files import atomic_write
from ..models.encoder import BiEncoder
from ..models.span_scorer import SCORER_FILE, SpanScorer, load_span_scorer, save_span_scorer

MEMBERS_DIR = "span_members"
MEMBERS_FILE = "span_members.json"
MODELS_FILE = "span_models.json"  # in a train_e2e output folder: its span models' folders, relative to it
Member = Tuple[BiEncoder, SpanScorer]


def configured_models(model, name: str = "spacy_pel.mentions.span_finder.v1") -> List[str]:
    """``model`` as a list of paths, as the config gives it: a path, a list of paths, or null (none)."""
    if model is None:
        return []
    models = [model] if isinstance(model, (str, Path)) else model
    if not isinstance(models, (list, tuple)) or not models or not all(isinstance(m, (str, Path)) and str(m) for m in models):
        raise ValueError(f"{name}: `model` must be a train_e2e folder or a list of them, not {model!r}")
    return [str(m) for m in models]


def listed_models(folder: str) -> List[str]:
    """The span models a ``train_e2e`` output folder lists in its ``span_models.json`` (one without it:
    its ``best``), else ``[folder]``."""
    manifest = Path(folder) / MODELS_FILE
    if not manifest.exists():  # a model folder; or a train_e2e output from before the list was written: its best
        older = Path(folder) / "best"
        return [str(older)] if (older / SCORER_FILE).exists() and not (Path(folder) / SCORER_FILE).exists() else [folder]
    listed = srsly.read_json(manifest)
    if not isinstance(listed, list) or not listed or not all(isinstance(x, str) and x for x in listed):
        raise ValueError(f"{manifest}: expected a list of span model folders relative to {folder}, not {listed!r}")
    return [str(Path(folder) / x) for x in listed]


def model_sources(models: Sequence[str]) -> List[str]:
    """The span model folders the configured ``models`` (:func:`configured_models`) stand for (a folder
    with a ``span_models.json``: the models it lists)."""
    return [source for m in models for source in listed_models(m)]


def write_models_file(output: Path, folders: Sequence[Path]) -> None:
    """List the span models trained into ``output`` (``folders`` inside it) in its ``span_models.json``."""
    atomic_write(output / MODELS_FILE, lambda tmp: srsly.write_json(tmp, [Path(f).relative_to(output).as_posix() for f in folders]))


def load_member(source: str) -> Member:
    """A ``train_e2e`` folder's transformer and span scorer."""
    return BiEncoder.from_pretrained(source), load_span_scorer(Path(source) / SCORER_FILE)


def place_model(encoder: Optional[BiEncoder], scorer: SpanScorer, like: BiEncoder, source: str) -> None:
    """Run a span model as ``like`` runs (precision, device): its own transformer ``encoder``, or with
    None a scorer over ``like`` itself; the scorer must fit the transformer it reads."""
    if encoder is not None:
        encoder.config.precision = like.config.precision
        encoder.to_device(str(like.device_))
    hidden = int((encoder or like).mention_model.config.hidden_size)
    if scorer.hidden_size != hidden:
        raise ValueError(f"span model {source}: its scorer expects token vectors of size {scorer.hidden_size}, but its "
                         f"transformer gives {hidden}: use the scorer trained with this transformer")
    scorer.to(like.device_)


def place_members(members: Sequence[Member], like: BiEncoder, sources: Sequence[str]) -> None:
    """:func:`place_model` for each further span model."""
    for (encoder, scorer), source in zip(members, sources):
        place_model(encoder, scorer, like, source)


def save_members(members: Sequence[Member], model: Sequence[str], sources: Sequence[str], path: Path) -> None:
    """Save ``members`` (from the folders ``sources``, what the config's ``model`` stood for) in ``path``."""
    for i, (encoder, scorer) in enumerate(members, 1):
        encoder.save(path / MEMBERS_DIR / str(i))
        save_span_scorer(scorer, path / MEMBERS_DIR / str(i) / SCORER_FILE)
    if members:
        srsly.write_json(path / MEMBERS_FILE, {"model": list(model), "members": list(sources)})


def read_members(path: Path, model: Sequence[str], sources: Sequence[str]) -> Optional[Tuple[List[str], List[Member]]]:
    """The members saved in ``path`` and their folders, if saved with the same ``model`` config (else
    None: the config's folders are read). ``sources``: the further models ``model`` stands for here (a
    file from before ``model`` was saved with it lists only them)."""
    saved = srsly.read_json(path / MEMBERS_FILE) if (path / MEMBERS_FILE).exists() else None
    if isinstance(saved, list):
        saved = {"model": list(model), "members": saved} if saved == list(sources) else None
    if not isinstance(saved, dict) or saved.get("model") != list(model):
        return None
    kept = [str(x) for x in saved["members"]]
    return kept, [load_member(str(path / MEMBERS_DIR / str(i))) for i in range(1, len(kept) + 1)]


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
