"""The output folder of a bulk run, one set of files per input shard, each written atomically::

    OUTPUT/mentions/<shard>.parquet   rows (doc_id, start_char, end_char, text, label, kb_id, score, confidence, candidates)
    OUTPUT/errors/<shard>.jsonl       {"doc_id", "reason"} per document that could not be linked (only if any)
    OUTPUT/done/<shard>.json          the completion marker: counts, the input's size and mtime, the pipeline's digest
    OUTPUT/summary.json               totals over every finished shard, and the last run's rate

A shard is finished when its marker exists and names the same input (path, size, mtime); the marker
is written last, so a run killed at any moment leaves no marker for a shard whose files may be
partial, and the next run links that shard again from the start (its files are replaced, never
appended to: no duplicate rows). A run with another pipeline (its files' digest differs) is refused
while the folder holds shards finished by the first (:func:`check_pipeline`): links of two pipelines
never mix in one folder, and none is overwritten unasked. ``OUTPUT/mentions`` reads as one Parquet
dataset (temporary files start with ``.``, which Parquet readers skip).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from .. import files
from ..corpora import UNALIGNED_EXAMPLES
from .shards import Shard

MENTIONS, ERRORS, DONE, SUMMARY = "mentions", "errors", "done", "summary.json"
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


def marker_path(output: Path, shard: Shard) -> Path:
    return Path(output) / DONE / f"{shard.name}.json"


def finished(output: Path, shard: Shard) -> Optional[dict]:
    """The shard's marker if it is finished for this very input, else None."""
    path = marker_path(output, shard)
    if not path.is_file():
        return None
    try:
        marker = json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return None
    return marker if marker.get("input") == shard.stamp() else None


def pipeline_stamp(pipeline: Path) -> dict:
    """What a marker records of the pipeline that linked its shard."""
    return {"path": str(pipeline), "sha256": files.folder_digest(pipeline)}


def check_pipeline(output: Path, markers: Iterable[dict], stamp: dict) -> None:
    """Refuse (``InputError``) to add a pipeline's links to a folder whose finished shards another
    pipeline linked (a marker without a digest: written before markers had one)."""
    other = [m for m in markers if (m.get("pipeline") or {}).get("sha256") != stamp["sha256"]]
    if other:
        by = (other[0].get("pipeline") or {}).get("path", "an unrecorded pipeline")
        raise files.InputError(
            f"{output}: {len(other)} finished shard(s) there were linked by another pipeline ({by}), not by "
            f"{stamp['path']}; give a new output folder, or delete {Path(output) / DONE} to link every shard again")


class ShardResult:
    """The documents of one shard as they come back (in any order), until all ``expected`` have;
    ``pipeline``: the :func:`pipeline_stamp` of the pipeline linking them."""

    def __init__(self, shard: Shard, expected: int, pipeline: dict):
        self.shard, self.expected, self.pipeline = shard, expected, pipeline
        self.docs: Dict[int, dict] = {}  # seq → {"doc_id", "rows", "error", "mentions", "nil", "seconds"}

    def add(self, seq: int, doc: dict) -> None:
        self.docs[seq] = doc  # a batch Ray ran twice gives the same seq twice: kept once

    @property
    def complete(self) -> bool:
        return len(self.docs) >= self.expected

    def write(self, output: Path) -> dict:
        """Write the shard's mentions, errors and (last) its marker; returns the marker."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        ordered = [self.docs[s] for s in sorted(self.docs)]
        rows = [row for doc in ordered if not doc["error"] for row in json.loads(doc["rows"])]
        errors = [{"doc_id": doc["doc_id"], "reason": doc["error"]} for doc in ordered if doc["error"]]
        table = pa.Table.from_pylist(rows, schema=schema())
        output = Path(output)
        files.atomic_write(output / MENTIONS / f"{self.shard.name}.parquet", lambda tmp: pq.write_table(table, tmp))
        error_file = output / ERRORS / f"{self.shard.name}.jsonl"
        if errors:
            files.write_jsonl(errors, error_file)
        else:
            error_file.unlink(missing_ok=True)  # left by an earlier, unfinished run of this shard
        marker = {
            "shard": self.shard.name, "input": self.shard.stamp(), "pipeline": self.pipeline, "docs": len(ordered),
            "mentions": len(rows),
            "nil": sum(doc["nil"] for doc in ordered if not doc["error"]), "errors": len(errors),
            "link_seconds": round(sum(doc["seconds"] for doc in ordered), 3),
            # given mentions not linked: a boundary inside white space; overlapping ones where only doc.ents are linked
            "unaligned": sum(doc.get("unaligned", 0) for doc in ordered if not doc["error"]),
            "unaligned_examples": [x for doc in ordered if not doc["error"]
                                   for x in json.loads(doc.get("unaligned_examples") or "[]")][:EXAMPLES],
            "overlapping_not_linked": sum(doc.get("overlapping_not_linked", 0) for doc in ordered if not doc["error"]),
        }
        files.atomic_write(marker_path(output, self.shard),
                           lambda tmp: tmp.write_text(json.dumps(marker, indent=1), encoding="utf8"))
        return marker


def totals(markers: List[dict]) -> dict:
    """The counts summed over shards' markers, and the first examples of given mentions not linked."""
    return {**{key: sum(m.get(key, 0) for m in markers) for key in COUNTS},
            "unaligned_examples": [x for m in markers for x in m.get("unaligned_examples", [])][:EXAMPLES]}


def write_summary(output: Path, summary: dict) -> None:
    files.atomic_write(Path(output) / SUMMARY, lambda tmp: tmp.write_text(json.dumps(summary, indent=2), encoding="utf8"))
