"""Encoding a KB's records or its name rows on Ray Data (``build-kb --ray``, ``build-names --ray``).

Only the encoding moves; the build around it is the local one (:mod:`.build`, :mod:`.names`): the
driver reads the KB, loads the encoder once (for its fingerprint), writes the work folder's stamp
(:mod:`.chunks`) and, at the end, assembles the entity table, name index and search index. The
chunks not yet finished in ``OUTPUT.partial/`` become ``ray.data.from_items`` (one block per chunk,
its records inside) → ``map_batches(EncodeWorker)`` on an actor pool of ``workers`` actors, each
loading the encoder once (``cpus_per_worker`` CPUs and torch threads each) and encoding one chunk per
call exactly as the local build does; the driver writes each chunk's vectors and its completion
marker as it comes back. So the output, its stamp and the encoder fingerprint are those of a local
build, and a killed job run again encodes only the chunks without a marker (a changed input or
encoder starts over, as locally).

Failures: a chunk whose encoding raises is tried again in its actor (``attempts`` times in all); an
actor that dies is restarted by Ray and its chunk retried once; the chunks still missing then get a
second pass, one at a time per actor. A chunk that fails even then is reported
(:class:`ChunkEncodeError`, naming each chunk and its last error) after every other chunk is written,
never left out: the build stops without writing the KB, and a re-run retries only the failed chunks.

Nodes: the encoder folder must be at the same path on every node (shared storage); the records
travel in the blocks and the vectors come back to the driver, so only the driver reads the KB file
and writes OUTPUT. Ray is imported inside the functions: an optional extra (``pip install spacy_pel[ray]``).
"""
from __future__ import annotations

import json
import logging
import re
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from tqdm.auto import tqdm

from ..files import InputError
from ..kb import Entity
from ..models.encoder import BiEncoder
from .chunks import CHUNK, PieceTower, concatenate, finished_chunks, prepare_work, resume_report, save_chunk

log = logging.getLogger(__name__)
KINDS = ("entities", "pieces")  # KB records (Entity) or ready word-piece inputs (name rows)
ACTOR_RESTARTS = 2  # an actor process that dies (OOM, segfault) is started again …
TASK_RETRIES = 1  # … and the chunk it held is run once more


class RayBuildError(RuntimeError):
    """A Ray build that could not finish: Ray could not be started or reached, or chunks failed."""


class ChunkEncodeError(RayBuildError):
    """Chunks of a Ray build that could not be encoded after every retry (each named, with its error)."""


@dataclass
class RayOptions:
    """Where and how wide a Ray build runs. ``address``: a Ray cluster (``auto``, ``ray://host:10001``;
    None starts Ray on this machine with ``num_cpus`` CPUs, all by default, unless it is running);
    ``workers``: actors, each with its own encoder (default: the cluster's CPUs / ``cpus_per_worker``);
    ``attempts``: tries of a chunk inside its actor; ``setup(encoder)``: run in each actor after loading
    (tests plant failures with it)."""

    address: Optional[str] = None
    workers: Optional[int] = None
    cpus_per_worker: int = 1
    num_cpus: Optional[int] = None
    attempts: int = 2
    setup: Optional[Callable] = None

    def check(self) -> None:
        if self.cpus_per_worker < 1 or (self.workers is not None and self.workers < 1) or self.attempts < 1:
            raise InputError("--workers and --cpus-per-worker must be at least 1")
        try:
            import ray.data  # noqa: F401
        except ImportError:
            raise InputError('--ray needs Ray: pip install "spacy_pel[ray]" (or "ray[data]" pyarrow)') from None


def connect(address: Optional[str], num_cpus: Optional[int]) -> bool:
    """``ray.init`` on this machine (``address`` None) or to a cluster; False if Ray was already up."""
    import ray

    if ray.is_initialized():
        return False
    kwargs = {"num_cpus": num_cpus} if address is None else {"address": address}
    try:
        ray.init(**kwargs, include_dashboard=False, logging_level=logging.WARNING)
    except Exception as err:  # noqa: BLE001 — Ray raises bare Exceptions (a start-up time-out, an unreachable head)
        where = "start Ray on this machine" if address is None else f"connect to the Ray cluster at {address}"
        raise RayBuildError(f"could not {where}: {_cause(err)}; the finished chunks are kept: run the build again") from err
    return True


def _chunks(ns: List[int], chunk_size: int) -> str:
    """``chunk 3 (records 30..39)`` or ``chunks 0, 1, 2 …`` for a report."""
    if len(ns) == 1:
        return f"chunk {ns[0]} (records {ns[0] * chunk_size}..{(ns[0] + 1) * chunk_size - 1})"
    return f"chunks {', '.join(map(str, ns[:10]))}{' …' if len(ns) > 10 else ''}"


def _cause(err: BaseException) -> str:
    """The innermost ``SomeError: message`` line of a Ray error (it carries the remote traceback as text)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in str(err).splitlines()]
    causes = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception|Interrupt): ", ln)]
    return causes[-1] if causes else f"{type(err).__name__}: {next((ln for ln in lines if ln), '')}"


def _failure(err: BaseException) -> str:
    where = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    at = f" (at {Path(where.filename).name}:{where.lineno})" if where else ""
    return f"{type(err).__name__}: {err}{at}"


class EncodeWorker:
    """``map_batches`` callable class: one per actor, holding one loaded encoder; each call encodes one
    chunk (one block of one item) and returns its vectors as bytes, or the error after ``attempts`` tries."""

    def __init__(self, encoder: str, precision: str, device: str, fingerprint: str, kind: str, batch_size: int,
                 threads: int = 1, attempts: int = 2, setup: Optional[Callable] = None):
        torch.set_num_threads(max(1, threads))
        self.kind, self.batch_size, self.attempts, self.error = kind, batch_size, attempts, ""
        self.encoder = BiEncoder.from_pretrained(encoder, precision=precision).to_device(device)
        if self.encoder.fingerprint() != fingerprint:  # a node that sees another encoder at this path
            self.error = (f"the encoder at {encoder} on this node has fingerprint {self.encoder.fingerprint()}, "
                          f"not the driver's {fingerprint}")
        if setup is not None:
            setup(self.encoder)
        self.tower = self.encoder if kind == "entities" else PieceTower(self.encoder)

    def encode(self, payload: str) -> np.ndarray:
        records = json.loads(payload)
        if self.kind == "entities":
            records = [Entity.from_dict(r) for r in records]
        return self.tower.encode_entities(records, batch_size=self.batch_size)

    def __call__(self, batch) -> dict:
        out = {k: [] for k in ("chunk", "first", "rows", "vectors", "error")}
        for item in batch.to_pylist():
            vectors, error = None, self.error
            for attempt in range(0 if error else self.attempts):
                try:
                    vectors = self.encode(item["payload"])
                    break
                except Exception as err:  # noqa: BLE001 — reported with the chunk, never dropped
                    error = f"failed {attempt + 1} time(s); last: {_failure(err)}"
            out["chunk"].append(item["chunk"])
            out["first"].append(item["first"])
            out["rows"].append(0 if vectors is None else len(vectors))
            out["vectors"].append(b"" if vectors is None else np.ascontiguousarray(vectors, np.float32).tobytes())
            out["error"].append("" if vectors is not None else error)
        return out


def _payload(records: Sequence, kind: str) -> str:
    if kind == "entities":
        return json.dumps([r.to_dict() for r in records], ensure_ascii=False)
    return json.dumps([list(map(int, r)) for r in records])


def _dataset(items: List[dict], worker_kwargs: dict, options: RayOptions, workers: int, alone: bool):
    import ray

    ds = ray.data.from_items(items, override_num_blocks=len(items))
    return ds.map_batches(
        EncodeWorker,
        fn_constructor_kwargs=worker_kwargs,
        batch_size=None,  # one block = one chunk = one call
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=workers, max_tasks_in_flight_per_actor=1 if alone else None),
        num_cpus=options.cpus_per_worker,
        max_restarts=ACTOR_RESTARTS,
        max_task_retries=TASK_RETRIES,
    )


def encode_on_ray(
    records: Sequence,
    kind: str,
    source: str,
    encoder: BiEncoder,
    stamp: Dict[str, object],
    work: Path,
    batch_size: int,
    progress: bool,
    chunk_size: Optional[int],
    options: RayOptions,
) -> Tuple[np.ndarray, dict]:
    """:func:`.chunks.encode_resumable` with the missing chunks encoded on Ray: ``records`` are
    :class:`Entity` (``kind="entities"``) or word-piece id lists (``"pieces"``); ``source``: the encoder
    folder or name the actors load (``encoder`` is the driver's copy, for the fingerprint and size).
    Returns the vectors and the resume report, with ``ray``: workers and chunks encoded and retried."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    chunk_size = chunk_size or CHUNK
    _, restarted = prepare_work(work, stamp, chunk_size)
    parts = finished_chunks(records, work, chunk_size, encoder.dim)
    report = resume_report(records, parts, work, restarted)
    todo = [n for n, p in enumerate(parts) if p is None]
    ray_report = {"workers": 0, "cpus_per_worker": options.cpus_per_worker, "chunks_encoded": 0, "chunks_retried": 0,
                  "encode_s": 0.0}
    if todo:
        local = Path(source).expanduser()
        worker_kwargs = {"encoder": str(local.resolve()) if local.exists() else source, "kind": kind,
                         "precision": str(stamp["precision"]), "device": str(stamp["device"]),
                         "fingerprint": encoder.fingerprint(), "batch_size": batch_size,
                         "threads": options.cpus_per_worker, "attempts": options.attempts, "setup": options.setup}
        items = []
        for n in todo:
            chunk = records[n * chunk_size : (n + 1) * chunk_size]
            items.append({"chunk": n, "first": n * chunk_size, "rows": len(chunk), "payload": _payload(chunk, kind)})
        started = connect(options.address, options.num_cpus)
        try:
            failed = _run(items, parts, work, worker_kwargs, options, progress, len(records), ray_report)
        finally:
            if started:
                import ray

                ray.shutdown()
        if failed:
            by_reason: Dict[str, List[int]] = {}
            for n, why in sorted(failed.items()):
                by_reason.setdefault(why, []).append(n)
            shown = "; ".join(f"{_chunks(ns, chunk_size)}: {why}" for why, ns in list(by_reason.items())[:3])
            raise ChunkEncodeError(
                f"{len(failed)} of {len(parts)} chunk(s) could not be encoded after retries ({shown}); the "
                f"{len(parts) - len(failed)} finished chunk(s) are kept in {work}: run the build again to retry the rest")
    report["ray"] = ray_report
    return concatenate(parts, encoder.dim), report


def _run(items, parts, work, worker_kwargs, options, progress, total, ray_report) -> Dict[int, str]:
    """Encode ``items`` in two passes; write each chunk as it comes back. Returns {chunk: last error} of
    the chunks that failed both passes."""
    import ray
    from ray.data import DataContext

    workers = options.workers or max(1, int(ray.cluster_resources().get("CPU", 1) // options.cpus_per_worker))
    workers = min(workers, len(items))
    ray_report["workers"] = workers
    ctx = DataContext.get_current()
    saved = (ctx.enable_progress_bars, ctx.max_errored_blocks)
    ctx.enable_progress_bars, ctx.max_errored_blocks = False, -1  # a chunk Ray cannot run is retried below
    errors: Dict[int, str] = {}
    expected = {item["chunk"]: item["rows"] for item in items}
    started = time.perf_counter()
    try:
        with tqdm(total=total, initial=sum(len(p) for p in parts if p is not None), desc="encoding on Ray",
                  unit=" rows", disable=not progress, smoothing=0.05) as bar:
            for alone in (False, True):
                todo = [item for item in items if parts[item["chunk"]] is None]
                if not todo:
                    break
                if alone:
                    ray_report["chunks_retried"] = len(todo)
                    log.warning("%d chunk(s) failed or were lost: encoding them again, one at a time per worker", len(todo))
                ds = _dataset(todo, worker_kwargs, options, min(workers, len(todo)), alone)
                try:
                    for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=0):
                        for row in batch.to_pylist():
                            _take(row, expected, parts, errors, work, ray_report, bar)
                except Exception as err:  # noqa: BLE001 — e.g. no actor could start: every chunk left is reported
                    for item in todo:
                        if parts[item["chunk"]] is None:
                            errors[item["chunk"]] = f"the Ray job failed: {_cause(err)}"
    finally:
        ctx.enable_progress_bars, ctx.max_errored_blocks = saved
    ray_report["encode_s"] = round(time.perf_counter() - started, 2)
    return {item["chunk"]: errors.get(item["chunk"]) or "lost: its worker died in both passes (a crash, or out of memory)"
            for item in items if parts[item["chunk"]] is None}


def _take(row: dict, expected: Dict[int, int], parts: List, errors: Dict[int, str], work: Path, ray_report: dict, bar) -> None:
    """One chunk back from an actor: written with its marker, or its error kept for the report."""
    n = row["chunk"]
    if parts[n] is not None:  # a chunk Ray ran twice: kept once
        return
    if row["error"] or row["rows"] != expected[n]:
        errors[n] = row["error"] or f"{row['rows']} vectors for {expected[n]} records"
        return
    vectors = np.frombuffer(row["vectors"], np.float32).reshape(row["rows"], -1)
    save_chunk(work, n, row["first"], vectors)
    parts[n] = vectors
    errors.pop(n, None)
    ray_report["chunks_encoded"] += 1
    bar.update(len(vectors))
