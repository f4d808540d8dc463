"""The output folder of a bulk run, one set of files per input shard, each written atomically::

    OUTPUT/mentions/<shard>.parquet   rows (doc_id, start_char, end_char, text, label, kb_id, score, confidence, candidates)
    OUTPUT/errors/<shard>.jsonl       {"doc_id", "reason"} per document that could not be linked (only if any)
    OUTPUT/done/<shard>.json          the completion marker: counts, the input's size and mtime, the pipeline's digest
    OUTPUT/summary.json               totals over every finished shard, and the last run's rate
    OUTPUT/stale/<date-time>/…        the files of shards no longer in the input, set aside on request

A shard is finished when its marker exists and names the same input (path, size, mtime) as it was
when the run planned it (a file that changed while it was linked is linked again); the marker
is written last, so a run killed at any moment leaves no marker for a shard whose files may be
partial, and the next run links that shard again from the start (its files are replaced, never
appended to: no duplicate rows). A run with another pipeline (its files' digest differs) is refused
while the folder holds any shard finished by the first (:func:`check_pipeline`): links of two pipelines
never mix in one folder, and none is overwritten unasked. Files of shards that are not in the input
(:func:`stale`: a file removed or renamed since) are refused too, or moved aside (:func:`set_aside`), so
``OUTPUT/mentions``, which reads as one Parquet dataset (temporary files start with ``.``, which
Parquet readers skip), holds the input's shards only, as the summary counts them.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from .. import files
from ..corpora import UNALIGNED_EXAMPLES
from .shards import Shard

log = logging.getLogger(__name__)
MENTIONS, ERRORS, DONE, SUMMARY, STALE = "mentions", "errors", "done", "summary.json", "stale"
SUFFIXES = {DONE: ".json", MENTIONS: ".parquet", ERRORS: ".jsonl"}  # a shard's files: OUTPUT/<folder>/<shard><suffix>
COUNTS = ("docs", "mentions", "nil", "errors", "unaligned", "overlapping_not_linked")  # markers before
# the last two did not count them (0)
EXAMPLES = UNALIGNED_EXAMPLES


def schema():
    import pyarrow as pa

    candidate = pa.struct([("id", pa.string()), ("name", pa.string()), ("score", pa.float64())])
    return pa.schema([
        ("doc_id", pa.string()), ("start_char", pa.int64()), ("end_char", pa.int64()), ("text", pa.string()),
        ("label", pa.string()), ("kb_id", pa.string()), ("score", pa.float64()), ("confidence", pa.float64()),
        ("candidates", pa.list_(candidate)),
    ])


def shard_file(output: Path, folder: str, name: str) -> Path:
    """The file of the shard ``name`` in ``folder`` (:data:`SUFFIXES`) of ``output``."""
    return Path(output) / folder / f"{name}{SUFFIXES[folder]}"


def marker_path(output: Path, shard: Shard) -> Path:
    return shard_file(output, DONE, shard.name)


def _read_marker(path: Path) -> Optional[dict]:
    try:
        marker = json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def finished(output: Path, shard: Shard, stamp: Optional[dict] = None) -> Optional[dict]:
    """The shard's marker if it is finished for this very input (``stamp``: the input's :meth:`Shard.stamp`,
    taken now by default), else None."""
    marker = _read_marker(marker_path(output, shard))
    return marker if marker is not None and marker.get("input") == (stamp or shard.stamp()) else None


def all_markers(output: Path) -> List[dict]:
    """Every readable completion marker in OUTPUT: the finished shards of any input."""
    paths = sorted((Path(output) / DONE).glob(f"*{SUFFIXES[DONE]}"))  # none if the folder is not there
    found = [_read_marker(p) for p in paths if not p.name.startswith(".")]
    return [m for m in found if m is not None]


def stale(output: Path, names: Iterable[str]) -> List[str]:
    """The shards with files in OUTPUT (a marker, mentions or errors) that are not among ``names`` (this
    input's shards): their input was removed or renamed, or they came from another input."""
    found = set()
    for folder, suffix in SUFFIXES.items():
        if (Path(output) / folder).is_dir():
            found.update(p.name[: -len(suffix)] for p in (Path(output) / folder).iterdir()
                         if p.name.endswith(suffix) and not p.name.startswith(".") and p.is_file())
    return sorted(found - set(names))


def set_aside(output: Path, names: Iterable[str]) -> Path:
    """Move the files of the shards ``names`` (:func:`stale`) to a new ``OUTPUT/stale/<date-time>`` folder,
    in the same layout (``…/mentions`` reads as a Parquet dataset); each move is a rename, the marker first."""
    base = Path(output) / STALE / time.strftime("%Y%m%d-%H%M%S")
    folder, n = base, 1
    while folder.exists():
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    for name in names:
        for sub in SUFFIXES:  # the marker first: a shard half moved is no longer finished in OUTPUT
            source = shard_file(output, sub, name)
            if source.is_file():
                shard_file(folder, sub, name).parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, shard_file(folder, sub, name))
    return folder


def pipeline_stamp(pipeline: Path) -> dict:
    """What a marker records of the pipeline that linked its shard."""
    return {"path": str(pipeline), "sha256": files.folder_digest(pipeline)}


def check_pipeline(output: Path, markers: Iterable[dict], stamp: dict) -> None:
    """Refuse (``InputError``) to add a pipeline's links to a folder whose finished shards (``markers``:
    give them all, :func:`all_markers`, not only the input's) another pipeline linked (a marker without a
    digest: written before markers had one)."""
    other = [m for m in markers if (m.get("pipeline") or {}).get("sha256") != stamp["sha256"]]
    if other:
        by = (other[0].get("pipeline") or {}).get("path", "an unrecorded pipeline")
        raise files.InputError(
            f"{output}: {len(other)} finished shard(s) there were linked by another pipeline ({by}), not by "
            f"{stamp['path']}; give a new output folder, or delete {Path(output) / DONE} to link every shard again")


class ShardResult:
    """The documents of one shard as they come back (in any order), until all ``expected`` have;
    ``pipeline``: the :func:`pipeline_stamp` of the pipeline linking them; ``input``: the shard's
    :meth:`Shard.stamp` when the run planned it (what its marker records)."""

    def __init__(self, shard: Shard, expected: int, pipeline: dict, input: dict):
        self.shard, self.expected, self.pipeline, self.input = shard, expected, pipeline, input
        self.docs: Dict[int, dict] = {}  # seq → {"doc_id", "rows", "error", "mentions", "nil", "seconds"}

    def add(self, seq: int, doc: dict) -> None:
        self.docs[seq] = doc  # a batch Ray ran twice gives the same seq twice: kept once

    @property
    def complete(self) -> bool:
        return len(self.docs) >= self.expected

    def write(self, output: Path) -> dict:
        """Write the shard's mentions, errors and (last) its marker; returns the marker. The marker names the
        input as it was planned: if the file changed since (a producer still writing it), the next run links
        it again, and a warning says so."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        ordered = [self.docs[s] for s in sorted(self.docs)]
        rows = [row for doc in ordered if not doc["error"] for row in json.loads(doc["rows"])]
        errors = [{"doc_id": doc["doc_id"], "reason": doc["error"]} for doc in ordered if doc["error"]]
        table = pa.Table.from_pylist(rows, schema=schema())
        output = Path(output)
        files.atomic_write(shard_file(output, MENTIONS, self.shard.name), lambda tmp: pq.write_table(table, tmp))
        error_file = shard_file(output, ERRORS, self.shard.name)
        if errors:
            files.write_jsonl(errors, error_file)
        else:
            error_file.unlink(missing_ok=True)  # left by an earlier, unfinished run of this shard
        marker = {
            "shard": self.shard.name, "input": self.input, "pipeline": self.pipeline, "docs": len(ordered),
            "mentions": len(rows),
            "nil": sum(doc["nil"] for doc in ordered if not doc["error"]), "errors": len(errors),
            "link_seconds": round(sum(doc["seconds"] for doc in ordered), 3),
            # given mentions not linked: a boundary inside white space; overlapping ones where only doc.ents are linked
            "unaligned": sum(doc.get("unaligned", 0) for doc in ordered if not doc["error"]),
            "unaligned_examples": [x for doc in ordered if not doc["error"]
                                   for x in json.loads(doc.get("unaligned_examples") or "[]")][:EXAMPLES],
            "overlapping_not_linked": sum(doc.get("overlapping_not_linked", 0) for doc in ordered if not doc["error"]),
            # … and those of a label no linker links, by label
            "not_linked_by_label": add_counts(json.loads(doc.get("not_linked_by_label") or "{}")
                                              for doc in ordered if not doc["error"]),
        }
        files.atomic_write(marker_path(output, self.shard),
                           lambda tmp: tmp.write_text(json.dumps(marker, indent=1), encoding="utf8"))
        try:
            changed = self.shard.stamp() != self.input
        except OSError:  # removed meanwhile
            changed = True
        if changed:
            log.warning(f"{self.shard.path} changed while it was linked: its documents as planned are written, "
                        "and the next run links it again")
        return marker


def add_counts(counts: Iterable[Dict[str, int]]) -> Dict[str, int]:
    """Counts by key (``{label: n}``) summed."""
    total: Dict[str, int] = {}
    for one in counts:
        for key, n in one.items():
            total[key] = total.get(key, 0) + n
    return total


def totals(markers: List[dict]) -> dict:
    """The counts summed over shards' markers, and the first examples of given mentions not linked."""
    return {**{key: sum(m.get(key, 0) for m in markers) for key in COUNTS},
            "unaligned_examples": [x for m in markers for x in m.get("unaligned_examples", [])][:EXAMPLES],
            "not_linked_by_label": add_counts(m.get("not_linked_by_label", {}) for m in markers)}


def write_summary(output: Path, summary: dict) -> None:
    files.atomic_write(Path(output) / SUMMARY, lambda tmp: tmp.write_text(json.dumps(summary, indent=2), encoding="utf8"))
