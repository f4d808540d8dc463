"""The folder of a ``pel_linker`` in a saved pipeline: ``encoder/``, ``kb/``, the parts' files,
``sources.json`` (the configured path each resource came from) and ``settings.json`` (the settings it was saved
with, compared, never applied: :mod:`.settings_record`), written and read by the component's
``to_disk``/``from_disk`` (and their bytes forms). A resource whose configured path differs from the
one it was saved from is not read: it loads from the config's path on first use — as does one named in
:func:`resources_from_paths` while a pipeline loads (``retarget``: a KB grown in place, at the path the saved
copy came from, is read from its folder)."""
from __future__ import annotations

import shutil
import sys
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Collection, Dict, Iterator, Mapping, Optional

import srsly

from ..files import file_digest, folder_digest
from ..models.encoder import BiEncoder
from ..retrieval.index import EntityIndex
from .folder_bytes import folder_from_bytes, folder_to_bytes
from .settings_record import SETTINGS_DIFFER, SETTINGS_FILE, settings_differ, write_settings

SOURCES_FILE = "sources.json"
DIGESTS_KEY = "sha256"  # sources.json's {part key: digest of its source's content when saved}
STATS_KEY = "stat"  # sources.json's {part key: its source's sizes and times when saved}: unchanged → not hashed
STAGING = ".pel_parts_staging"  # the parts are written here first, then replace the previous save's parts
RESOURCE_SETTINGS = {"context_window", "precision", "device", "search_precision"}  # applied when resources load
NO_THRESHOLD = ("{name}: this pipeline has no NIL threshold, so every mention is linked to some entity; "
                "`python -m spacy_pel calibrate PIPELINE DEV.spacy -o OUT` picks one on a corpus with NIL mentions")


KB_CHANGED = ("{name} links against its own copy of KB {kb} ({n} entities), saved with the pipeline; the folder {kb} "
              "has changed since ({now}). A config naming the KB path it was saved from keeps the copy; to link "
              "against the folder, run `python -m spacy_pel retarget PIPELINE --kb {kb} -o OUTPUT`")
PART_CHANGED = ("{name} reads its own copy of {key}, saved with the pipeline from {path}; the file or folder {path} "
                "here has other content. A config naming the path it was saved from keeps the copy; to read this one, "
                "name it by another path (e.g. {absolute})")
LIBRARIES = ("spacy", "spacy_pel", "thinc", "srsly", "confection")
IDENTITY_FILES = ("entities.jsonl", "embeddings.npy")  # sizes compared: what --add or a rebuild changes


def _changed_since(configured: str, copy: Path) -> Optional[str]:
    """How the KB folder at the configured path ``configured`` (if there is one here) differs from the
    pipeline's saved copy ``copy`` of it: another entity count, entity encoder, or names (the digest of
    ids, names, synonyms and types both record; the table's sizes for older KBs); None if it looks the
    same or is not there."""
    folder = Path(configured).expanduser()
    try:
        there, saved = (EntityIndex.read_meta(f) for f in (folder, copy))
        sizes = [(folder / f).stat().st_size == (copy / f).stat().st_size for f in IDENTITY_FILES]
    except (OSError, ValueError):
        return None
    if there.get("entities") != saved.get("entities"):
        return f"{there.get('entities')} entities"
    if there.get("encoder_fingerprint") != saved.get("encoder_fingerprint"):
        return "another entity encoder"
    digests = there.get("name_inputs_sha256"), saved.get("name_inputs_sha256")
    if all(digests):  # recorded by both (KBs built since session 70): names and synonyms compared, not sizes
        return None if digests[0] == digests[1] else "other entities, names or synonyms"
    return None if all(sizes) else "other entities"


def source_digest(source: Optional[str]) -> Optional[str]:
    """The SHA-256 of a part's source ``source`` as it is here (a file's or a folder's files' contents); None if
    it is no file or folder here."""
    path = Path(source).expanduser() if source else None
    try:
        return file_digest(path) if path and path.is_file() else folder_digest(path) if path and path.is_dir() else None
    except OSError:
        return None


def source_stat(source: Optional[str]) -> Optional[str]:
    """A part's source ``source`` as the file system describes it (a file's size and modification time; a
    folder's file count, total size and latest time): a load where it is unchanged reads no content to
    compare digests. None if it is no file or folder here."""
    path = Path(source).expanduser() if source else None
    try:
        if path and path.is_file():
            files = [path.stat()]
        elif path and path.is_dir():
            files = [p.stat() for p in path.rglob("*") if p.is_file()]
        else:
            return None
    except OSError:
        return None
    return f"{len(files)}:{sum(s.st_size for s in files)}:{max((s.st_mtime_ns for s in files), default=0)}"


def _part_changed(source: str, digest: Optional[str], stat: Optional[str]) -> bool:
    """Whether a part's ``source`` here holds other content than the ``digest`` recorded when it was saved
    (hashed only when its recorded ``stat`` differs from now's, or none was recorded)."""
    if not digest or (stat and stat == source_stat(source)):
        return False
    now = source_digest(source)
    return bool(now) and now != digest


def _replace_parts(path: Path, staging: Path, exclude: Collection[str], data_names: Collection[str]) -> None:
    """Move the parts' files written to ``staging`` into the component folder ``path``, removing those an
    earlier save left there (a part that holds nothing now leaves none); kept when a part is excluded (its
    files are not known here: sources.json, which does not list them, keeps them unread)."""
    keep = {"encoder", "kb", SOURCES_FILE, SETTINGS_FILE, STAGING}
    if (path / SOURCES_FILE).exists() and not set(exclude) & set(data_names):
        for old in path.iterdir():
            if old.name not in keep:
                shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
    for new in staging.iterdir():
        target = path / new.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        new.replace(target)
    staging.rmdir()


# per component name, the resources (``kb``, ``encoder``, a part's key) read from their configured paths while loading
_FROM_PATHS: ContextVar[Mapping[str, frozenset]] = ContextVar("pel_resources_from_paths", default={})


@contextmanager
def resources_from_paths(name: str, keys: Collection[str]) -> Iterator[None]:
    """While the block loads a pipeline, the pel_linker ``name`` takes the resources ``keys`` (``kb``, ``encoder``,
    ``rules.<rule>``) from the paths its config names, not the copies saved with it — even where a copy was saved
    from that very path (a KB grown there by ``build-kb --add`` since)."""
    token = _FROM_PATHS.set({**_FROM_PATHS.get(), name: frozenset(keys)})
    try:
        yield
    finally:
        _FROM_PATHS.reset(token)


def caller_level() -> int:
    """The ``stacklevel`` of a warning that names the user's line (e.g. their ``spacy.load``) instead of the
    library frames it went through."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in LIBRARIES:
        frame, level = frame.f_back, level + 1
    return level


class LinkerFolder:
    """Serialisation of :class:`~spacy_pel.pipeline.linker.PELLinker` (a mixin: it uses the
    component's ``encoder``, ``index``, ``sources``, ``cfg``, ``parts()``, ``set_resources`` and ``_load``)."""

    def to_disk(self, path, *, exclude=tuple()) -> None:
        """Write ``encoder/``, ``kb/``, the parts' files and ``sources.json``; ``exclude`` names any of
        encoder, kb and the parts' data names. A component that names a KB but has not loaded it yet
        (``add_pipe`` then ``to_disk``, no call in between) loads it first, so the saved pipeline holds
        its encoder and KB rather than depending on the folders it was made from."""
        if self.cfg.kb is not None and (self.index is None or self.encoder is None) and not {"kb", "encoder"} <= set(exclude):
            self.ensure_loaded()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        written: Dict[str, Optional[str]] = {}
        # a resource held from no path (trained here by `update`, or set in memory) is recorded as the config's
        # own value: loaded with that config, the pipeline takes the copy saved here, not that path's files
        if self.encoder is not None and "encoder" not in exclude:
            self.encoder.save(path / "encoder")
            # with no `encoder` configured the copy is read whatever it came from (the KB's meta.json names it on the
            # machine it was made on): recorded as null, so a shipped pipeline names no folder of that machine
            written["encoder"] = (self.sources.get("encoder") or self.cfg.encoder) if self.cfg.encoder else None
        if self.index is not None and "kb" not in exclude:
            # the KB's meta.json names the encoder saved beside it (relatively), not the folder it came from
            self.index.to_disk(path / "kb", encoder_folder=path / "encoder" if "encoder" in written else None)
            written["kb"] = self.sources.get("kb") or self.cfg.kb
        staging = path / STAGING
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        digests: Dict[str, str] = {}
        stats: Dict[str, str] = {}
        for key, part in self.parts():
            if part.data_name not in exclude and part.to_disk(staging):
                written[key] = part.source
                stat, digest = source_stat(part.source), source_digest(part.source)
                if digest:
                    digests[key] = digest
                    stats[key] = stat
        _replace_parts(path, staging, exclude, [p.data_name for _, p in self.parts()])
        records = {DIGESTS_KEY: digests, STATS_KEY: stats} if digests else {}
        srsly.write_json(path / SOURCES_FILE, {**written, **records})
        write_settings(self, path)

    def from_disk(self, path, *, exclude=tuple()) -> "LinkerFolder":
        """Read the saved resources, except those excluded and those whose config path differs from
        the path they were saved from (those load from the config's path on first use)."""
        path = Path(path)
        saved = srsly.read_json(path / SOURCES_FILE) if (path / SOURCES_FILE).exists() else {}
        differ = settings_differ(self, path)  # made from other settings than it was saved with (add_pipe, then this)
        if differ:
            warnings.warn(SETTINGS_DIFFER.format(name=self.name, diffs="; ".join(differ)), UserWarning, stacklevel=caller_level())
        if self.cfg.threshold is None and not any(d.startswith("threshold ") for d in differ):
            warnings.warn(NO_THRESHOLD.format(name=self.name), UserWarning, stacklevel=caller_level())

        from_paths = _FROM_PATHS.get().get(self.name, frozenset())

        listed = (path / SOURCES_FILE).exists()  # else saved before sources.json: every part there is the save's

        def wanted(key: str, folder: Path, configured: Optional[str], data_name: str, null_keeps: bool = True) -> bool:
            """Whether the saved copy of ``key`` is read: written by the save sources.json records (not left over by
            an earlier one) and from the path the config names (or null, for a part that null does not turn off)."""
            return (folder.exists() and data_name not in exclude and key not in from_paths
                    and (key in saved or not listed)
                    and (configured == saved.get(key) or (configured is None and null_keeps)))

        encoder = index = None
        if wanted("encoder", path / "encoder", self.cfg.encoder, "encoder"):
            encoder = BiEncoder.from_pretrained(path / "encoder")
        if wanted("kb", path / "kb", self.cfg.kb, "kb"):
            index = EntityIndex.from_disk(path / "kb", self.cfg.search_precision)
            changed = self.cfg.kb is not None and _changed_since(self.cfg.kb, path / "kb")
            if changed:
                warnings.warn(KB_CHANGED.format(name=self.name, kb=self.cfg.kb, n=len(index), now=changed),
                              UserWarning, stacklevel=caller_level())
        for key, part in self.parts():
            if wanted(key, path, part.source, part.data_name, not part.null_turns_off):
                part.from_disk(path)
                recorded = (saved.get(DIGESTS_KEY) or {}).get(key), (saved.get(STATS_KEY) or {}).get(key)
                if part.source and _part_changed(part.source, *recorded):
                    warnings.warn(PART_CHANGED.format(name=self.name, key=key, path=part.source,
                                                      absolute=Path(part.source).expanduser().resolve()),
                                  UserWarning, stacklevel=caller_level())
        sources = {"kb": saved.get("kb") if index else None, "encoder": saved.get("encoder") if encoder else None}
        if encoder is not None and index is not None:
            self.set_resources(encoder, index, sources=sources)
        else:  # completed from the config's paths on first use
            self.encoder, self.index, self.sources = encoder, index, sources
        return self

    def reconfigure(self, settings: Dict[str, object]) -> None:
        """Make held resources follow settings just changed in ``cfg`` (``configure_linker``), as a
        reload with them would: another ``kb`` / ``encoder`` is loaded as ``initialize`` loads it; the
        precisions, device and context window are applied to the encoder and KB held."""
        if self.index is None or self.encoder is None:
            return  # read with the new settings on first use
        if settings.get("kb") or settings.get("encoder"):
            self._load(settings.get("kb"), settings.get("encoder"))
        elif RESOURCE_SETTINGS & set(settings):
            if "search_precision" in settings:  # the flat search's matrix is made again only for this one
                self.index.set_search_precision(self.cfg.search_precision)
            self.set_resources(self.encoder, self.index, sources=self.sources)

    def to_bytes(self, *, exclude=tuple()) -> bytes:
        return folder_to_bytes(lambda folder: self.to_disk(folder, exclude=exclude))

    def from_bytes(self, bytes_data: bytes, *, exclude=tuple()) -> "LinkerFolder":
        folder_from_bytes(bytes_data, lambda folder: self.from_disk(folder, exclude=exclude))
        return self
