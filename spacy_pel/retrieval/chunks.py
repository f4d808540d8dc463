"""Resumable encoding in chunks: the work folder ``OUTPUT.partial/`` of a KB or name-index build::

    stamp.json          what the vectors are made from (input, encoder, precision, chunk size …)
    chunk_NNNNN.npy     the vectors of chunk N (float32, one row per record), written atomically …
    chunk_NNNNN.done    … then its completion marker (first record, rows, dim)

A chunk counts as finished only with its marker and vectors of the marker's shape; anything else is
encoded again. A work folder whose stamp differs from the build's is discarded (the report's
``restarted`` and the ``spacy_pel`` logger say why). The local build (:func:`encode_resumable`) and the
Ray build (:mod:`.ray_build`) write the same files, so either resumes the other's work.
"""
from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
from tqdm.auto import tqdm

from ..files import atomic_write
from ..models.pieces import entity_text_fields

CHUNK = 16384
STAMP_FILE = "stamp.json"
STAMP_VERSION = 1
log = logging.getLogger(__name__)


def texts_digest(fields: Iterable[Sequence[str]]) -> str:
    """SHA-256 of entities' encoded inputs, each ``(name, types, extra text)``: a KB stamp's ``entities_sha256``."""
    h = hashlib.sha256()
    for texts in fields:
        h.update("\x1f".join(texts).encode("utf8", "surrogatepass"))
        h.update(b"\x1e")
    return h.hexdigest()


def entity_texts_digest(entities: Sequence, entity_text: str) -> str:
    """:func:`texts_digest` of exactly what is encoded of each entity (name, types and the extra text
    ``entity_text`` chooses: :func:`~spacy_pel.models.pieces.entity_text_fields`)."""
    return texts_digest(entity_text_fields(entity, entity_text) for entity in entities)


# what each stamp field means, for the "starting a clean build" message
STAMP_WORDS = {
    "version": "stamp version",
    "input_sha256": "input file content",
    "format": "KB format",
    "reader": "reader settings",
    "entities": "entity count",
    "entities_sha256": "entity texts",
    "encoder_fingerprint": "entity encoder",
    "precision": "precision",
    "device": "device type",
    "chunk_size": "chunk size",
}


def read_stamp(file: Path) -> Optional[dict]:
    try:
        data = json.loads(Path(file).read_text(encoding="utf8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def changed_words(old: dict, new: dict) -> List[str]:
    """What differs between two stamps, in words (``input file content``, ``entity encoder`` …)."""
    keys = [*STAMP_WORDS, *sorted((set(old) | set(new)) - set(STAMP_WORDS))]
    return [STAMP_WORDS.get(k, k) for k in keys if old.get(k) != new.get(k)]


def prepare_work(work: Path, stamp: Dict[str, object], chunk_size: int) -> Tuple[dict, Optional[str]]:
    """Make ``work`` hold a build of ``stamp``: a folder of anything else is emptied first.
    Returns the full stamp (with version and chunk size) and why the folder was emptied (or None)."""
    stamp = {**stamp, "version": STAMP_VERSION, "chunk_size": chunk_size}
    restarted: Optional[str] = None
    if work.exists():
        old = read_stamp(work / STAMP_FILE)
        if old is None:
            restarted = f"{work} has no readable {STAMP_FILE}"
        elif old != stamp:
            restarted = f"{work} holds a partial build of something else (changed: {', '.join(changed_words(old, stamp))})"
        if restarted:
            log.warning("%s: discarding it and starting a clean build", restarted)
            shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    atomic_write(work / STAMP_FILE, lambda tmp: tmp.write_text(json.dumps(stamp, indent=2), encoding="utf8"))
    return stamp, restarted


def chunk_file(work: Path, n: int) -> Path:
    return Path(work) / f"chunk_{n:05d}.npy"


def marker_file(work: Path, n: int) -> Path:
    return Path(work) / f"chunk_{n:05d}.done"


def load_chunk(work: Path, n: int, rows: int, dim: int) -> Optional[np.ndarray]:
    """A finished chunk's vectors, or ``None`` when its marker or vectors are missing, unreadable or of
    another shape (then it is encoded again)."""
    marker = read_stamp(marker_file(work, n))
    if marker is None or marker.get("rows") != rows or marker.get("dim") != dim:
        return None
    try:
        vectors = np.load(chunk_file(work, n), allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if vectors.shape != (rows, dim) or vectors.dtype != np.float32:
        return None
    return vectors


def save_chunk(work: Path, n: int, first: int, vectors: np.ndarray) -> None:
    """Write chunk ``n``'s vectors atomically, then its completion marker."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)

    def save(tmp: Path) -> None:
        with tmp.open("wb") as f:  # a file object: np.save would add .npy to a bare name
            np.save(f, vectors, allow_pickle=False)

    atomic_write(chunk_file(work, n), save)
    marker = {"chunk": n, "first": first, "rows": int(vectors.shape[0]), "dim": int(vectors.shape[1])}
    atomic_write(marker_file(work, n), lambda tmp: tmp.write_text(json.dumps(marker), encoding="utf8"))


def finished_chunks(records: Sequence, work: Path, chunk_size: int, dim: int) -> List[Optional[np.ndarray]]:
    """Each chunk's vectors if finished, else None (chunk ``n`` holds records ``n*chunk_size`` on)."""
    return [load_chunk(work, n, len(records[s : s + chunk_size]), dim)
            for n, s in enumerate(range(0, len(records), chunk_size))]


def resume_report(records: Sequence, parts: List[Optional[np.ndarray]], work: Path, restarted: Optional[str],
                  unit: str = "entities") -> dict:
    """What a build found finished in ``work`` (logged when anything was)."""
    reused = sum(len(p) for p in parts if p is not None)
    if reused:
        log.info("%s: resuming, %d of %d %s already encoded", work, reused, len(records), unit)
    return {"reused_entities": reused, "reused_chunks": sum(p is not None for p in parts), "chunks": len(parts),
            "restarted": restarted}


def concatenate(parts: List[np.ndarray], dim: int) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros((0, dim), np.float32)


def encode_resumable(
    records: Sequence,
    encoder,
    stamp: Dict[str, object],
    work: Path,
    batch_size: int,
    progress: bool,
    chunk_size: Optional[int] = None,
    unit: str = "entities",
) -> Tuple[np.ndarray, dict]:
    """Encode ``records`` in chunks saved under ``work`` (``encoder.encode_entities``: a
    :class:`~spacy_pel.models.encoder.BiEncoder` or a :class:`PieceTower`); returns the vectors and
    what was resumed (``reused_entities``, ``reused_chunks``, ``chunks``, ``restarted``). ``unit``
    names the records on the progress bar and in the log (``"names"`` for name rows)."""
    chunk_size = chunk_size or CHUNK
    _, restarted = prepare_work(work, stamp, chunk_size)
    parts = finished_chunks(records, work, chunk_size, encoder.dim)
    report = resume_report(records, parts, work, restarted, unit)
    with tqdm(total=len(records), initial=report["reused_entities"], desc=f"encoding {unit}", unit=f" {unit}",
              disable=not progress, smoothing=0.05) as bar:
        update: Callable[[int], object] = bar.update
        for n, start in enumerate(range(0, len(records), chunk_size)):
            if parts[n] is not None:
                continue
            chunk = records[start : start + chunk_size]
            parts[n] = encoder.encode_entities(chunk, batch_size=batch_size, progress=update if progress else False)
            save_chunk(work, n, start, parts[n])
    return concatenate(parts, encoder.dim), report


class PieceTower:
    """What :func:`encode_resumable` asks of an encoder, over ready word-piece inputs (name rows):
    the entity tower of ``encoder`` on each sequence of ids."""

    def __init__(self, encoder):
        self.encoder, self.dim = encoder, encoder.dim

    def encode_entities(self, seqs: Sequence[List[int]], batch_size: int = 256, progress=False,
                        max_tokens: Optional[int] = None) -> np.ndarray:
        seqs = list(seqs)
        if not seqs:
            return np.zeros((0, self.dim), np.float32)
        return self.encoder._encode(seqs, [len(s) for s in seqs], self.encoder.embed_entities, batch_size, "names", progress,
                                    max_tokens)
