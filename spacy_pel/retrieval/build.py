"""``python -m spacy_pel.build_kb``: turn a KB file into an entity index folder.

Encoding runs in chunks that are kept in ``OUTPUT.partial/`` until the KB is written, so an
interrupted build (Ctrl-C, a crash, ``kill -9``) resumes where it stopped. The folder's stamp
(``stamp.json``) records what the vectors were made from: the input file's content hash, the reader
settings (format, ``skip_bad_lines``), a hash of the entity texts, the entity encoder's fingerprint,
the precision and the chunk size. A partial build made from anything else is discarded and the build
starts clean; the returned report (``resume``) and the ``spacy_pel`` logger say which happened.

Every option is checked before any heavy work (reading the KB, loading the encoder, encoding).
"""
from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from tqdm.auto import tqdm

from ..files import BadLines, InputError, atomic_write, file_digest
from ..kb import READERS, Entity, kb_files, read_kb
from ..models.encoder import CONFIG_FILE, DEFAULT_ENCODER, BiEncoder, EncoderConfig, tower_precision
from ..retrieval.index import INDEX_KINDS, EntityIndex

CHUNK = 16384
STAMP_FILE = "stamp.json"
STAMP_VERSION = 1
log = logging.getLogger(__name__)

# what each stamp field means, for the "starting a clean build" message
_STAMP_WORDS = {
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


# ---------------------------------------------------------------------------- checks before work


def _looks_like_path(source: str) -> bool:
    return source.startswith(("/", ".", "~")) or "\\" in source or source.count("/") > 1


def check_encoder_source(source: str) -> None:
    """Refuse an ``--encoder`` that can only fail: a path that does not exist, a folder that is not a model."""
    if source in (DEFAULT_ENCODER, "sentence-transformers/all-MiniLM-L6-v2"):
        return
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise InputError(f"encoder {source} is a file; give a folder (a saved encoder or a Hugging Face model)")
        if not (path / CONFIG_FILE).exists() and not (path / "config.json").exists():
            raise InputError(
                f"encoder folder {source} has neither {CONFIG_FILE} (a spacy_pel encoder) nor config.json (a Hugging Face model)"
            )
    elif _looks_like_path(source):
        raise InputError(f"encoder folder not found: {source}")


def load_encoder(source: str, precision: str = "auto", device: str = "auto") -> BiEncoder:
    """:meth:`BiEncoder.from_pretrained`, with a failure to load told in one line (:class:`InputError`)."""
    check_encoder_source(source)
    try:
        encoder = BiEncoder.from_pretrained(source, precision=precision)
    except (OSError, ValueError) as err:
        if isinstance(err, InputError):
            raise
        first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), type(err).__name__)
        if not Path(source).expanduser().exists():  # neither a folder nor a model the offline hub cache holds
            raise InputError(f"encoder not found: {source} (no such folder, and no Hugging Face model of that name "
                             f"available offline: {first})") from err
        raise InputError(f"cannot load encoder {source!r}: {first}") from err
    return encoder.to_device(device)


def check_device(device: str) -> None:
    if device == "auto":
        return
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise InputError(f"unknown device {device!r}; use auto, cpu or cuda") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device {device!r} asked for, but no CUDA GPU is available (use --device cpu or auto)")


def check_options(
    kb: Optional[Path],
    output: Path,
    format: str,
    encoder: str,
    index: str,
    add: Optional[Path],
    batch_size: int,
    precision: str,
    device: str,
    chunk_size: int,
) -> None:
    """Every reason :func:`build_kb` would fail that can be known before reading or encoding anything."""
    if format not in READERS:
        raise InputError(f"unknown KB format {format!r}; choose one of {', '.join(READERS)}")
    if index not in INDEX_KINDS:
        raise InputError(f"unknown index kind {index!r}; choose one of {', '.join(INDEX_KINDS)}")
    try:
        EncoderConfig(precision=precision)
    except ValueError as err:
        raise InputError(f"--precision: {err}") from None
    if batch_size < 1 or chunk_size < 1:
        raise InputError("batch size and chunk size must be at least 1")
    check_device(device)
    if add is None and kb is None:
        raise InputError("give a KB file to build from (--kb FILE), or --add FILE to extend an existing KB")
    if add is not None and kb is not None:
        raise InputError("give --kb (build a new KB) or --add (extend the KB at --output), not both")
    kb_files(add if add is not None else kb, format)
    output = Path(output)
    if add is not None:
        if not (output / "meta.json").is_file():
            raise InputError(f"--add extends an existing KB, but {output} is not a KB folder (no meta.json)")
    elif output.exists():
        if not output.is_dir():
            raise InputError(f"output {output} is a file; give a folder to write the KB to")
        if any(output.iterdir()) and not (output / "meta.json").is_file():
            raise InputError(f"output {output} is a folder that is not a KB; refusing to replace it")
    if add is None or encoder != DEFAULT_ENCODER:
        check_encoder_source(encoder)


# ---------------------------------------------------------------------------- resumable encoding


def entity_texts_digest(entities: Sequence[Entity], encoder: BiEncoder) -> str:
    """SHA-256 of exactly what is encoded of each entity (name, types, description-or-synonyms)."""
    h = hashlib.sha256()
    for entity in entities:
        h.update("\x1f".join(encoder.entity_text_fields(entity)).encode("utf8", "surrogatepass"))
        h.update(b"\x1e")
    return h.hexdigest()


def _read_stamp(file: Path) -> Optional[dict]:
    try:
        data = json.loads(file.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _load_chunk(file: Path, rows: int, dim: int) -> Optional[np.ndarray]:
    """A finished chunk's vectors, or ``None`` when missing or unreadable (then it is encoded again)."""
    if not file.exists():
        return None
    try:
        vectors = np.load(file, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if vectors.shape != (rows, dim) or vectors.dtype != np.float32:
        return None
    return vectors


def encode_resumable(
    entities: Sequence[Entity],
    encoder: BiEncoder,
    stamp: Dict[str, object],
    work: Path,
    batch_size: int,
    progress: bool,
    chunk_size: Optional[int] = None,
) -> Tuple[np.ndarray, dict]:
    """Encode in chunks saved under ``work``; returns the vectors and what was resumed.

    Chunks already in ``work`` are reused only when its stamp equals ``stamp`` (see the module doc);
    otherwise ``work`` is emptied first and the returned dict says why (``restarted``).
    """
    chunk_size = chunk_size or CHUNK
    stamp = {**stamp, "version": STAMP_VERSION, "chunk_size": chunk_size}
    stamp_file = work / STAMP_FILE
    restarted: Optional[str] = None
    if work.exists():
        old = _read_stamp(stamp_file)
        if old is None:
            restarted = f"{work} has no readable {STAMP_FILE}"
        elif old != stamp:
            keys = [*_STAMP_WORDS, *sorted((set(old) | set(stamp)) - set(_STAMP_WORDS))]
            changed = [_STAMP_WORDS.get(k, k) for k in keys if old.get(k) != stamp.get(k)]
            restarted = f"{work} holds a partial build of something else (changed: {', '.join(changed)})"
        if restarted:
            log.warning("%s: discarding it and starting a clean build", restarted)
            shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    atomic_write(stamp_file, lambda tmp: tmp.write_text(json.dumps(stamp, indent=2), encoding="utf8"))

    starts = list(range(0, len(entities), chunk_size))
    parts: List[Optional[np.ndarray]] = [
        _load_chunk(work / f"chunk_{n:05d}.npy", len(entities[s : s + chunk_size]), encoder.dim)
        for n, s in enumerate(starts)
    ]
    reused = sum(len(entities[s : s + chunk_size]) for s, p in zip(starts, parts) if p is not None)
    reused_chunks = sum(p is not None for p in parts)
    if reused:
        log.info("%s: resuming, %d of %d entities already encoded", work, reused, len(entities))
    with tqdm(
        total=len(entities),
        initial=reused,
        desc="encoding entities",
        unit=" entities",
        disable=not progress,
        smoothing=0.05,
    ) as bar:
        update: Callable[[int], object] = bar.update
        for n, start in enumerate(starts):
            if parts[n] is not None:
                continue
            chunk = entities[start : start + chunk_size]
            vectors = encoder.encode_entities(chunk, batch_size=batch_size, progress=update if progress else False)
            file = work / f"chunk_{n:05d}.npy"
            atomic_write(file, lambda tmp, v=vectors: _save_npy(tmp, v))
            parts[n] = vectors
    report = {"reused_entities": reused, "reused_chunks": reused_chunks, "chunks": len(starts), "restarted": restarted}
    vectors = np.concatenate(parts) if parts else np.zeros((0, encoder.dim), np.float32)
    return vectors, report


def _save_npy(path: Path, vectors: np.ndarray) -> None:
    with path.open("wb") as f:  # a file object: np.save would add .npy to a bare name
        np.save(f, vectors, allow_pickle=False)


# ---------------------------------------------------------------------------- the build


def build_kb(
    kb: Optional[Path],
    output: Path,
    format: str = "jsonl",
    encoder: str = DEFAULT_ENCODER,
    index: str = "flat",
    add: Optional[Path] = None,
    batch_size: int = 128,
    precision: str = "auto",
    device: str = "auto",
    progress: bool = True,
    skip_bad_lines: bool = False,
    chunk_size: Optional[int] = None,
) -> dict:
    """Build ``output`` from ``kb`` (or, with ``add``, append ``add``'s entities to the KB at ``output``).

    Returns the report written to ``output/build_report.json``: counts, wall time, entities/s, what was
    resumed (``resume``) and, with ``skip_bad_lines``, the malformed lines left out. Without
    ``skip_bad_lines`` a malformed line stops the build (``KBFormatError``, ``FILE:LINE: reason``)
    before anything is encoded.
    """
    t0 = time.perf_counter()
    output = Path(output)
    chunk_size = chunk_size or CHUNK
    check_options(kb, output, format, encoder, index, add, batch_size, precision, device, chunk_size)
    bad_lines = BadLines() if skip_bad_lines else None
    source_path = Path(add if add is not None else kb)
    resume: Optional[dict] = None
    if add is not None:
        existing = EntityIndex.from_disk(output)
        new = read_kb(add, format, bad_lines)
        clash = [e.id for e in new if e.id in existing.row]
        if clash:
            raise InputError(
                f"{add}: {len(clash)} entity id(s) already in the KB at {output}, e.g. {', '.join(clash[:5])}; "
                "--add only appends new ids"
            )
        source = existing.encoder_source if encoder == DEFAULT_ENCODER else encoder
        enc = load_encoder(source, precision, device)
        existing.check_encoder(enc)
        t_enc = time.perf_counter()
        existing.add(new, enc, batch_size=batch_size, progress=progress)
        encoded, index_obj = len(new), existing
    else:
        input_sha256 = file_digest(*kb_files(source_path, format))
        entities = read_kb(source_path, format, bad_lines)
        enc = load_encoder(encoder, precision, device)
        t_enc = time.perf_counter()
        work = output.with_name(output.name + ".partial")
        fingerprint = enc.fingerprint()
        stamp = {
            "input_sha256": input_sha256,
            "format": format,
            "reader": {"skip_bad_lines": skip_bad_lines},
            "entities": len(entities),
            "entities_sha256": entity_texts_digest(entities, enc),
            "encoder_fingerprint": fingerprint,
            "precision": tower_precision(precision, enc.device_),  # "auto" as it resolved here
            "device": enc.device_.type,
        }
        vectors, resume = encode_resumable(entities, enc, stamp, work, batch_size, progress, chunk_size)
        index_obj = EntityIndex(
            entities,
            vectors,
            metric=enc.config.similarity,
            fingerprint=fingerprint,
            encoder_source=str(encoder),
            kind=index,
        )
        encoded = len(entities) - resume["reused_entities"]
    t_index = time.perf_counter()
    index_obj.to_disk(output)
    if add is None:
        shutil.rmtree(output.with_name(output.name + ".partial"), ignore_errors=True)
    t1 = time.perf_counter()
    report = {
        "kb": str(source_path),
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
    if resume is not None:
        report["resume"] = resume
    if bad_lines is not None:
        report.update(bad_lines.as_dict())
    (output / "build_report.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    return report
