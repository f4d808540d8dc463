"""What a KB build (``build-kb``, :mod:`.build`) checks before any heavy work (reading the KB, loading the
encoder, encoding): its options, the encoder it loads (given, or the one an earlier KB records), the
KB's size for its index kind, the ids ``--add`` may append (not an id or alternative id the KB holds), and the
encoder ``--add`` encodes them with (one that encodes entities, as the KB's rows read: its ``entity_text``).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

from ..files import InputError, check_output_folder
from ..kb import READERS, Entity, kb_files
from ..models.encoder import (
    CONFIG_FILE,
    DEFAULT_ENCODER,
    DEFAULT_ENCODER_NAMES,
    BiEncoder,
    EncoderConfig,
    looks_like_a_path,
)
from ..models.precision import device_problem, index_precision, pick_device
from ..models.saved_settings import check_encodable
from .encoder_record import recorded_encoder
from .index import INDEX_KINDS, MIN_IVFPQ, EntityIndex
from .reuse import other_entity_text

log = logging.getLogger(__name__)


def check_encoder_source(source: str) -> None:
    """Refuse an ``--encoder`` that can only fail: a path that does not exist, a folder that is not a model."""
    if source in DEFAULT_ENCODER_NAMES:
        return
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise InputError(f"encoder {source} is a file; give a folder (a saved encoder or a Hugging Face model)")
        if not (path / CONFIG_FILE).exists() and not (path / "config.json").exists():
            raise InputError(
                f"encoder folder {source} has neither {CONFIG_FILE} (a spacy_pel encoder) nor config.json (a Hugging Face model)"
            )
    elif looks_like_a_path(source):
        raise InputError(f"encoder folder not found: {source}")


def load_encoder(source: str, precision: str = "auto", device: str = "auto", rows: str = "entities") -> BiEncoder:
    """:meth:`BiEncoder.from_pretrained` for encoding a KB's entity rows or its name rows (``rows``:
    ``"entities"`` or ``"names"``; ``"auto"`` precision as :func:`index_precision` resolves it for them),
    with a failure to load told in one line (:class:`InputError`)."""
    check_encoder_source(source)
    precision = index_precision(precision, pick_device(device), rows)
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
    problem = device_problem(device)
    if problem is not None:
        raise InputError(f"--device: {problem}")


def check_options(
    kb: Optional[Path],
    output: Path,
    format: str,
    encoder: Optional[str],
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
    else:
        check_output_folder(output, "KB", lambda folder: (folder / "meta.json").is_file())
    if encoder is not None and (add is None or encoder != DEFAULT_ENCODER):
        check_encoder_source(encoder)


def chosen_encoder(encoder: Optional[str], reuse: Optional[Path]) -> str:
    """The encoder of a build (not ``--add``): ``encoder`` as given; none given, the one the ``reuse`` KB
    records (its ``meta.json``: its vectors can then be taken), else :data:`DEFAULT_ENCODER`."""
    if encoder is not None or reuse is None:
        return DEFAULT_ENCODER if encoder is None else encoder
    source = recorded_encoder(EntityIndex.read_meta(reuse), reuse) or DEFAULT_ENCODER
    try:
        check_encoder_source(source)
    except InputError as err:
        raise InputError(f"--reuse {reuse} was built by an encoder that cannot be found ({err}); give --encoder") from None
    log.info("--reuse %s: encoding with the encoder that built it, %s", reuse, source)
    return source


def check_index_size(index: str, entities: int) -> None:
    """Refuse an index kind the KB is too small for (``ivfpq``: :data:`MIN_IVFPQ` entities), before encoding."""
    if index == "ivfpq" and entities < MIN_IVFPQ:
        raise InputError(f"--index ivfpq needs at least {MIN_IVFPQ:,} entities to train its codebooks, and this KB "
                         f"has {entities:,}; use --index flat (exact, and small at this size) or hnsw")


def check_added(existing: EntityIndex, new: Sequence[Entity], add: Path, output: Path) -> None:
    """Refuse ``--add`` entities whose id the KB holds, as an id or an alternative id (a corpus's old id
    would change meaning); warn of added alternative ids that already name an entity (they keep naming it)."""
    lookup, ids = existing.lookup, existing.entities.ids
    clash = [e.id if e.id in existing.row else f"{e.id} (an alternative id of {ids[lookup[e.id]]})"
             for e in new if e.id in lookup]
    if clash:
        raise InputError(f"{add}: {len(clash)} entity id(s) already in the KB at {output}, e.g. {', '.join(clash[:5])}; "
                         "--add only appends new ids")
    taken = [f"{a} of {e.id} ({ids[lookup[a]]})" for e in new for a in e.extra.get("alt_ids") or [] if a in lookup]
    if taken:
        log.warning("%s: %d alternative id(s) of the added entities already name an entity of the KB, which they keep "
                    "naming: %s", add, len(taken), ", ".join(taken[:5]))


def check_add_encoder(existing: EntityIndex, encoder: BiEncoder, source: str, output: Path) -> None:
    """Refuse, before anything is encoded, the encoder ``--add`` would encode with (``source``, loaded: ``encoder``)
    when it is not the KB's entity encoder (:meth:`EntityIndex.check_encoder`), encodes no entity (a removed setting
    kept: :func:`check_encodable`), or reads another ``entity_text`` than the KB's rows (its stamp: the towers may
    be the same, so the fingerprint agrees, yet the grown KB would mix two entity inputs)."""
    existing.check_encoder(encoder)
    check_encodable(encoder.config)
    other = other_entity_text(output, existing.entities, encoder.config.entity_text)
    if other is not None:
        raise InputError(f"--add: the rows of the KB at {output} were encoded with entity_text {other}, but the encoder "
                         f"{source} reads {encoder.config.entity_text}, so the grown KB would mix two entity inputs; "
                         f"give an encoder saved with entity_text {other}, or build the whole KB file again with this "
                         f"one (build-kb --kb FILE --reuse {output} encodes only what changed)")
