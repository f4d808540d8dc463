"""``python -m spacy_pel.build_kb``: turn a KB file into an entity index folder.

Encoding runs in chunks that are kept in ``OUTPUT.partial/`` until the KB is written, so an
interrupted build (Ctrl-C, a crash, ``kill -9``) resumes where it stopped. The folder's stamp
(``stamp.json``) records what the vectors were made from: the input file's content hash, the reader
settings (format, ``skip_bad_lines``), a hash of the entity texts, the entity encoder's fingerprint,
the precision and the chunk size. A partial build made from anything else is discarded and the build
starts clean; the returned report (``resume``) and the ``spacy_pel`` logger say which happened.

Every option is checked before any heavy work (reading the KB, loading the encoder, encoding: :mod:`.build_checks`).

``reuse``: a KB folder whose stamp equals the one this build would write (same KB file content,
reader settings, entity texts, entity encoder fingerprint and precision) is copied instead of
encoded again: the workflow's final KB after a training run that left the entity tower frozen is
the KB ``build_kb`` wrote before it, while a trained entity tower (another fingerprint) encodes anew.
A KB folder of the same entity encoder and precision made from other input (an earlier release of the
KB) gives the vectors of the entities whose encoded text it holds, and only the others are encoded
(:mod:`.reuse`).
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Callable, Optional

from ..files import BadLines, InputError, atomic_dir, atomic_write, file_digest, json_text, link_or_copy, output_lock
from ..kb import kb_files, read_kb
from ..models.encoder import DEFAULT_ENCODER
from ..models.saved_settings import check_encodable
from ..retrieval.index import EntityIndex, KeptNames
from .build_checks import (
    check_add_encoder,
    check_added,
    check_device,
    check_encoder_source,
    check_index_size,
    check_options,
    chosen_encoder,
    load_encoder,
)
from .chunks import CHUNK, STAMP_FILE, encode_resumable, entity_texts_digest, read_stamp
from .digests import name_inputs_digest
from .encoder_record import RELATIVE_KEY, encoder_location, relative_record
from .ray_build import RayOptions, encode_on_ray
from .reuse import earlier_entities, encode_reusing

# the checks live in :mod:`.build_checks`; named here too, where the other commands import them from
__all__ = ["CHUNK", "STAMP_FILE", "build_kb", "check_device", "check_encoder_source", "check_replace", "encode_resumable",
           "load_encoder", "reusable"]
log = logging.getLogger(__name__)
# what a KB folder records of its input (its stamp.json), in words: another value refuses a rebuild without force
REPORT_FILE = "build_report.json"
RECORDED = {"input_sha256": "KB file content", "format": "KB format", "encoder_fingerprint": "entity encoder",
            "kb": "KB file"}


# ---------------------------------------------------------------------------- what may be replaced


def recorded_input(output: Path) -> dict:
    """What the KB folder ``output`` was built from: its ``stamp.json``; for a KB built before stamps
    were kept, its KB file's path and format (``build_report.json``) and encoder (``meta.json``)."""
    stamp = read_stamp(output / STAMP_FILE)
    if stamp is not None:
        return stamp
    report = read_stamp(output / REPORT_FILE) or {}
    meta = read_stamp(output / "meta.json") or {}
    old = {"kb": report.get("kb"), "format": report.get("format"), "encoder_fingerprint": meta.get("encoder_fingerprint")}
    return {k: v for k, v in old.items() if v is not None}


def check_replace(output: Path, source: dict, force: bool) -> None:
    """Refuse to replace the KB folder ``output`` when it was built from other input than ``source``
    (keys of :data:`RECORDED`; those the folder does not record are not compared), or was extended
    with ``--add`` since, unless ``force``. A folder that holds no KB yet passes."""
    if force or not (output / "meta.json").is_file():
        return
    old = recorded_input(output)
    changed = [RECORDED[k] for k in source if k in old and old[k] != source[k]]
    if old.get("added"):
        changed.append("entities added with --add since")
    if changed:
        raise InputError(f"{output} holds a KB built from other input ({', '.join(changed)} differ); "
                         "use --force to replace it")


def reusable(folder: Optional[Path], stamp: dict, index: str) -> bool:
    """True when ``folder`` is a finished KB, never extended, of index kind ``index``, whose stamp
    records exactly ``stamp`` (the device it ran on aside: the vectors do not depend on it)."""
    if folder is None or not (Path(folder) / "meta.json").is_file():
        return False
    old = read_stamp(Path(folder) / STAMP_FILE)
    meta = read_stamp(Path(folder) / "meta.json") or {}
    if old is None or old.get("added") or meta.get("index", "flat") != index:
        return False
    same = [k for k in stamp if k != "device"]
    return all(old.get(k) == stamp[k] for k in same) and set(old) - {"device"} == set(same)


def _copy_kb(source: Path, output: Path, names: KeptNames, encoder_source: str, extra: Callable[[Path], None]) -> None:
    """``source``'s files into ``output`` (hard links where the file system allows, else copies), atomically,
    recording ``encoder_source`` as the encoder that built it (the one this build was given: its entity tower
    is ``source``'s, its mention tower may be newer), with what ``extra(folder)`` adds (this build's report);
    the name indexes of the KB folder it replaces kept or set aside (``names``)."""
    with atomic_dir(output, on_old=names.set_aside) as tmp:
        shutil.copytree(source, tmp, copy_function=link_or_copy, dirs_exist_ok=True)
        meta = json.loads((tmp / "meta.json").read_text(encoding="utf8"))
        for name in ("meta.json", REPORT_FILE):  # hard links to source's: written anew, not through them
            (tmp / name).unlink(missing_ok=True)
        meta = {k: v for k, v in meta.items() if k != RELATIVE_KEY}  # source's own: recorded anew
        meta.update(encoder_source=encoder_source, **relative_record(encoder_source, output))
        _write_json(tmp / "meta.json", meta)
        names.carry(tmp)
        extra(tmp)


# ---------------------------------------------------------------------------- the build


def build_kb(
    kb: Optional[Path],
    output: Path,
    format: str = "jsonl",
    encoder: Optional[str] = None,
    index: str = "flat",
    add: Optional[Path] = None,
    batch_size: int = 128,
    precision: str = "auto",
    device: str = "auto",
    progress: bool = True,
    skip_bad_lines: bool = False,
    chunk_size: Optional[int] = None,
    force: bool = False,
    ray: Optional[RayOptions] = None,
    reuse: Optional[Path] = None,
) -> dict:
    """Build ``output`` from ``kb`` (or, with ``add``, append ``add``'s entities to the KB at ``output``).

    ``output`` is locked while it is built (a second build into it fails at once, naming the first's
    pid); a KB already there that was built from other input (another KB file content, format or
    encoder) is replaced only with ``force``. ``ray``: the entities are encoded on Ray
    (:mod:`.ray_build`), into the same resumable chunks and output as a local build. ``encoder`` not
    given (None): with ``add`` the KB's own, with ``reuse`` the one that built it (:func:`chosen_encoder`).

    ``reuse``: a KB folder to copy instead of encoding, when it was built from exactly this input and
    entity encoder (:func:`reusable`); else, when it was encoded by this entity encoder at this precision,
    the one whose vectors the entities it holds unchanged take (:func:`.reuse.earlier_entities`; the
    report's ``reused_from``, ``entities_reused`` and ``resume.reuse`` say what was taken, or why not).

    Returns the report written to ``output/build_report.json``: counts, wall time, entities/s, what was
    resumed (``resume``) and, with ``skip_bad_lines``, the malformed lines left out. Without
    ``skip_bad_lines`` a malformed line stops the build (``KBFormatError``, ``FILE:LINE: reason``)
    before anything is encoded.
    """
    t0 = time.perf_counter()
    output = Path(output)
    chunk_size = CHUNK if chunk_size is None else chunk_size  # 0 is refused by check_options, not the default
    check_options(kb, output, format, encoder, index, add, batch_size, precision, device, chunk_size)
    if ray is not None:
        ray.check()
    if reuse is not None and add is not None:
        raise InputError("--reuse copies a finished KB into a new one; it does not go with --add")
    if reuse is not None and Path(reuse).resolve() == output.resolve():
        raise InputError(f"--reuse {reuse} is the output folder itself; give the KB to copy from")
    if add is None:
        encoder = chosen_encoder(encoder, reuse)
    with output_lock(output):  # KB.lock, which build-names of this KB holds too (.kb_lock)
        return _build(kb, output, format, encoder, index, add, batch_size, precision, device, progress,
                      skip_bad_lines, chunk_size, force, ray, t0, reuse)


def _build(kb, output, format, encoder, index, add, batch_size, precision, device, progress, skip_bad_lines,
           chunk_size, force, ray, t0, reuse=None) -> dict:
    bad_lines = BadLines() if skip_bad_lines else None
    source_path = Path(add if add is not None else kb)
    resume: Optional[dict] = None
    stamp: Optional[dict] = None
    if add is not None:
        existing = EntityIndex.from_disk(output)
        if existing.kind == "ivfpq":  # before the encoder is loaded and anything encoded (hnsw and flat extend)
            raise InputError(f"{output} is a compressed ({existing.kind}) KB, which cannot be extended in place: "
                             "build it again from the whole KB file (build-kb --reuse OLD_KB encodes only what changed)")
        # what the KB was built from, kept with this file appended (read now: writing the KB replaces the folder)
        stamp = recorded_input(output)
        stamp["added"] = [*stamp.get("added", []), {"kb": str(add), "format": format,
                                                     "input_sha256": file_digest(*kb_files(add, format))}]
        new = read_kb(add, format, bad_lines)
        check_added(existing, new, add, output)
        source = existing.encoder_source if encoder in (None, DEFAULT_ENCODER) else encoder
        enc = load_encoder(source, precision, device)
        check_add_encoder(existing, enc, source, output)  # its fingerprint, its entity_text as the rows'
        # what --reuse needs to take the added rows' vectors (.reuse.earlier_entities): their texts and precision
        stamp["added"][-1].update(entities=len(new), entities_sha256=entity_texts_digest(new, enc.config.entity_text),
                                  encoder_fingerprint=enc.fingerprint(), precision=enc.resolved_precision)
        t_enc = time.perf_counter()
        existing.add(new, enc, batch_size=batch_size, progress=progress)
        encoded, index_obj = len(new), existing
    else:
        input_sha256 = file_digest(*kb_files(source_path, format))
        check_replace(output, {"input_sha256": input_sha256, "format": format, "kb": str(source_path)}, force)
        entities = read_kb(source_path, format, bad_lines)
        check_index_size(index, len(entities))
        enc = load_encoder(encoder, precision, device)
        check_encodable(enc.config)  # a removed setting kept: before any work folder is made
        t_enc = time.perf_counter()
        work = output.with_name(output.name + ".partial")
        fingerprint = enc.fingerprint()
        check_replace(output, {"encoder_fingerprint": fingerprint}, force)
        stamp = {
            "input_sha256": input_sha256,
            "format": format,
            "reader": {"skip_bad_lines": skip_bad_lines},
            "entities": len(entities),
            "entities_sha256": entity_texts_digest(entities, enc.config.entity_text),
            "encoder_fingerprint": fingerprint,
            "precision": enc.resolved_precision,
            "device": enc.device_.type,
        }
        if reusable(reuse, stamp, index):
            t_copy = time.perf_counter()
            names = KeptNames(output, fingerprint, entities)
            report = {"kb": str(source_path), "format": format, "encoder": str(encoder), "index": index,
                      "precision": enc.resolved_precision, "entities_total": len(entities), "entities_encoded": 0,
                      "reused_from": str(reuse), "wall_s": None, "copy_s": None}

            def copied(folder: Path) -> None:  # the report, in the copy's one rename
                report.update(copy_s=round(time.perf_counter() - t_copy, 1), **_names_report(names.report()))
                _write_into(folder, report, t0)

            _copy_kb(Path(reuse), output, names, encoder_location(encoder), copied)
            return _with_names(output, report, names.report())
        earlier = earlier_entities(reuse, entities, enc) if reuse is not None else None
        if earlier is not None and earlier.reason:
            log.warning("--reuse %s: nothing reused (%s); every entity is encoded", reuse, earlier.reason)

        def encode(todo):  # the entities to encode, in chunks stamped with their own texts (see .reuse)
            sub = stamp if len(todo) == len(entities) else {
                **stamp, "entities": len(todo), "entities_sha256": entity_texts_digest(todo, enc.config.entity_text)}
            if ray is None:
                return encode_resumable(todo, enc, sub, work, batch_size, progress, chunk_size)
            return encode_on_ray(todo, "entities", str(encoder), enc, sub, work, batch_size, progress, chunk_size, ray)

        vectors, resume = encode_reusing(entities, earlier, encode, enc.dim)
        index_obj = EntityIndex(
            entities,
            vectors,
            metric=enc.config.similarity,
            fingerprint=fingerprint,
            encoder_source=encoder_location(encoder),
            kind=index,
            entity_settings=enc.entity_settings(),
            name_inputs=name_inputs_digest(entities),
        )
        encoded = len(entities) - resume.get("reused_entities", 0) - (earlier.reused if earlier else 0)
    t_index = time.perf_counter()
    report = {
        "kb": str(source_path),
        "format": format,
        "encoder": str(source if add is not None else encoder),  # --add: the KB's own, unless one was given
        "index": index_obj.kind,
        "precision": enc.resolved_precision,
        "entities_total": len(index_obj),
        "entities_encoded": encoded,
        "wall_s": None,
        "encode_s": round(t_index - t_enc, 1),
        "entities_per_s": round(encoded / max(t_index - t_enc, 1e-9), 1),
    }
    if resume is not None:
        if resume.get("reuse", {}).get("reused"):
            report.update(reused_from=resume["reuse"]["from"], entities_reused=resume["reuse"]["reused"])
        report["resume"] = resume
    if bad_lines is not None:
        report.update(bad_lines.as_dict())
    kept = index_obj.to_disk(output, extra=lambda folder: _write_into(folder, report, t0, stamp))
    if add is None:
        shutil.rmtree(output.with_name(output.name + ".partial"), ignore_errors=True)
    return _with_names(output, report, kept)


def _write_into(folder: Path, report: dict, t0: float, stamp: Optional[dict] = None) -> None:
    """The build's ``stamp`` and ``report`` (its wall time now) into the new KB ``folder``, before it takes its
    place: one rename puts the KB and its record of what it was built from in place (a kill after it leaves a
    KB that knows it, ``--add``'s entities included), never a KB without them."""
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    if stamp is not None:
        _write_json(folder / STAMP_FILE, stamp)
    _write_json(folder / REPORT_FILE, report)


def _with_names(output: Path, report: dict, kept: dict) -> dict:
    """``report`` with what became of the name indexes (``kept``), written again into ``output`` when that adds to
    it (those set aside: known only once the new folder took its place)."""
    if _names_report(kept) and report.get("name_indexes") != kept:
        report.update(_names_report(kept))
        atomic_write(output / REPORT_FILE, lambda tmp: _write_json(tmp, report))
    return report


def _write_json(path: Path, data: dict) -> None:
    """The KB's own JSON records (meta, stamp, report) as every JSON report is written: never a bare NaN."""
    path.write_text(json_text(data, indent=2), encoding="utf8")


def _names_report(kept: dict) -> dict:
    """The report's ``name_indexes``: the name indexes in the folder kept, or set aside (and where)."""
    return {"name_indexes": kept} if kept else {}
