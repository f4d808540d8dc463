"""``python -m spacy_pel.build_kb``: turn a KB file into an entity index folder.

Encoding runs in chunks that are kept in ``OUTPUT.partial/`` until the KB is written, so an
interrupted build resumes where it stopped (with the same encoder) instead of starting over.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Optional

import numpy as np
from tqdm.auto import tqdm

from ..kb import read_kb
from ..models.encoder import DEFAULT_ENCODER, BiEncoder
from ..retrieval.index import EntityIndex

CHUNK = 16384


def encode_resumable(
    entities, encoder: BiEncoder, fingerprint: str, work: Path, batch_size: int, progress: bool
) -> np.ndarray:
    """Encode in chunks saved under ``work``; chunks already there (same ``fingerprint``) are reused."""
    stamp = work / "fingerprint.txt"
    if work.exists() and (not stamp.exists() or stamp.read_text() != f"{fingerprint} {len(entities)}"):
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    stamp.write_text(f"{fingerprint} {len(entities)}")
    parts = []
    with tqdm(total=len(entities), desc="encoding entities", unit=" ent", disable=not progress, smoothing=0.02) as bar:
        for n, start in enumerate(range(0, len(entities), CHUNK)):
            chunk = entities[start : start + CHUNK]
            file = work / f"chunk_{n:05d}.npy"
            if file.exists():
                vectors = np.load(file, allow_pickle=False)
            else:
                vectors = encoder.encode_entities(chunk, batch_size=batch_size)
                tmp = file.with_suffix(".tmp.npy")
                np.save(tmp, vectors, allow_pickle=False)
                tmp.rename(file)
            parts.append(vectors)
            bar.update(len(chunk))
    return np.concatenate(parts) if parts else np.zeros((0, encoder.dim), np.float32)


def build_kb(
    kb: Path,
    output: Path,
    format: str = "jsonl",
    encoder: str = DEFAULT_ENCODER,
    index: str = "flat",
    add: Optional[Path] = None,
    batch_size: int = 128,
    precision: str = "fp32",
    device: str = "auto",
    progress: bool = True,
) -> dict:
    """Build ``output`` from ``kb`` (or, with ``add``, append ``add``'s entities to the KB at ``output``).

    Returns the report written to ``output/build_report.json``: counts, wall time, entities/s.
    """
    t0 = time.perf_counter()
    if add is not None:
        existing = EntityIndex.from_disk(output)
        source = existing.encoder_source if encoder == DEFAULT_ENCODER else encoder
        enc = BiEncoder.from_pretrained(source, precision=precision).to_device(device)
        new = read_kb(add, format)
        t_enc = time.perf_counter()
        existing.add(new, enc, batch_size=batch_size, progress=progress)
        encoded, index_obj = len(new), existing
    else:
        entities = read_kb(kb, format)
        if not entities:
            raise ValueError(f"{kb}: no entities read")
        enc = BiEncoder.from_pretrained(encoder, precision=precision).to_device(device)
        t_enc = time.perf_counter()
        work = output.with_name(output.name + ".partial")
        fingerprint = enc.fingerprint()
        vectors = encode_resumable(entities, enc, fingerprint, work, batch_size, progress)
        index_obj = EntityIndex(
            entities,
            vectors,
            metric=enc.config.similarity,
            fingerprint=fingerprint,
            encoder_source=str(encoder),
            kind=index,
        )
        encoded = len(entities)
    t_index = time.perf_counter()
    index_obj.to_disk(output)
    if add is None:
        shutil.rmtree(output.with_name(output.name + ".partial"), ignore_errors=True)
    t1 = time.perf_counter()
    report = {
        "kb": str(add or kb),
        "format": format,
        "encoder": str(encoder),
        "index": index_obj.kind,
        "precision": precision,
        "entities_total": len(index_obj),
        "entities_encoded": encoded,
        "wall_s": round(t1 - t0, 1),
        "encode_s": round(t_index - t_enc, 1),
        "entities_per_s": round(encoded / max(t_index - t_enc, 1e-9), 1),
    }
    (output / "build_report.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    return report
