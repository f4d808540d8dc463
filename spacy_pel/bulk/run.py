"""Link a corpus on Ray Data: :func:`link_corpus` (``python -m spacy_pel bulk``).

The plan: every unfinished input shard is cut into chunks of ``batch_size`` documents
(:mod:`.shards`); ``ray.data.from_items(chunks)`` → ``flat_map(read_chunk)`` (one small read task
per chunk, no CPU reserved: reading is I/O) → ``map_batches(LinkWorker)`` on an actor pool of
``workers`` actors, each loading the saved pipeline once (``cpus_per_worker`` CPUs and torch threads
each) → the driver streams the linked documents back, and as soon as every document of a shard has
come back it writes the shard's files and its completion marker (:mod:`.output`).

Failures: a document whose linking raises is retried alone, and reported in the errors file after
its second failure. An actor that dies is restarted by Ray and its batch retried once; a batch Ray
cannot run even then is not fatal (``max_errored_blocks = -1``): its documents get a second pass,
each alone in its batch, and those that still do not come back are written to the errors file as lost. So the job finishes, and every input document is
in exactly one of ``mentions/`` (its mentions, possibly none) or ``errors/``.

Ray is imported inside the functions: the package works without it (``pip install spacy_pel[ray]``).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from .. import files
from ..pipeline.mention_finders import check_mention_source
from ..retrieval.ray_build import connect
from . import output as out
from .shards import Chunk, Shard, find_shards, plan_chunks, raw_text, read_chunk, split_chunk
from .worker import LinkWorker

log = logging.getLogger(__name__)
ACTOR_RESTARTS = 2  # an actor process that dies (OOM, segfault) is started again …
BATCH_RETRIES = 1  # … and the batch it held is run once more


def check_pipeline(pipeline: Path, shards: List[Shard], chunks: Optional[Dict[str, List[Chunk]]] = None) -> None:
    """Refuse a pipeline that cannot find mentions in raw-text shards (before starting anything): JSON lines,
    Parquet, and PubTator shards without any annotation line (``chunks``: the shards' plans, which say so)."""
    raw = [s for s in shards if raw_text(s, (chunks or {}).get(s.name, []))]
    check_mention_source(pipeline, raw[0].path if raw else None, given=len(raw) < len(shards))


def refuse_stale(output: Path, input, stale: List[str]) -> None:
    """Refuse (one line) an OUTPUT with files of shards that are not in INPUT (:func:`.output.stale`)."""
    if stale:
        names = ", ".join(stale[:3]) + (f" and {len(stale) - 3} more" if len(stale) > 3 else "")
        raise files.InputError(
            f"{output} holds {len(stale)} shard(s) that are not in {input} ({names}: removed, renamed or of another "
            f"input), whose rows in {Path(output) / out.MENTIONS} would mix with this input's; give their input, a new "
            f"output folder, or --set-aside-stale to move them to {Path(output) / out.STALE}")


def _dataset(chunks: List[Chunk], pipeline: Path, workers: int, cpus_per_worker: int, batch_size: int,
             setup: Optional[Callable], alone: bool = False):
    """The linking dataset; ``alone`` (the second pass): one call at a time per actor, so that a
    document that kills its actor takes no other document's call down with it."""
    import ray

    ds = ray.data.from_items([c.as_item() for c in chunks], override_num_blocks=len(chunks))
    # no CPU reserved (the actors hold them), but a few at a time: each 0-CPU task would start a Python worker
    ds = ds.flat_map(read_chunk, num_cpus=0, compute=ray.data.TaskPoolStrategy(size=max(2, workers)))
    return ds.map_batches(
        LinkWorker,
        fn_constructor_kwargs={"pipeline": str(pipeline), "threads": cpus_per_worker, "batch_size": batch_size,
                               "setup": setup},
        batch_size=None,  # one block = one chunk = one call
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=workers, max_tasks_in_flight_per_actor=1 if alone else None),
        num_cpus=cpus_per_worker,
        max_restarts=ACTOR_RESTARTS,
        max_task_retries=BATCH_RETRIES,
    )


def _lost(chunks: List[Chunk], result: out.ShardResult) -> None:
    """Documents of an unfinished shard that never came back: into its errors, by id."""
    for chunk in chunks:
        missing = [s for s in range(chunk.first_seq, chunk.first_seq + chunk.count) if s not in result.docs]
        if not missing:
            continue
        try:
            ids = {item["seq"]: item["doc_id"] for item in read_chunk(chunk.as_item())}
        except Exception:  # noqa: BLE001 — the input itself went away: name the documents by position
            ids = {}
        for seq in missing:
            result.add(seq, {"doc_id": ids.get(seq, f"{chunk.path}#{seq}"), "rows": "[]", "mentions": 0, "nil": 0,
                             "error": "lost: the worker linking it died, in its batch and again alone (a crash, or out of memory)",
                             "seconds": 0.0})


def link_corpus(
    input: files.PathLike,
    output: files.PathLike,
    pipeline: files.PathLike,
    *,
    address: Optional[str] = None,
    workers: Optional[int] = None,
    batch_size: int = 64,
    cpus_per_worker: int = 1,
    num_cpus: Optional[int] = None,
    progress: bool = True,
    setup: Optional[Callable] = None,
    on_shard: Optional[Callable[[dict], None]] = None,
    set_aside_stale: bool = False,
) -> dict:
    """Link every document of INPUT with the saved ``pipeline`` into OUTPUT (see :mod:`.output`).

    ``address``: a Ray cluster (``auto``, ``ray://host:10001``); None starts Ray on this machine
    (``num_cpus`` of it; all by default) unless it is already running. ``workers``: actors, each with
    its own copy of the pipeline (default: the cluster's CPUs / ``cpus_per_worker``). Finished shards
    are skipped; a folder holding any finished shard another pipeline linked is refused, and so is one holding
    files of shards not in INPUT (removed or renamed since), unless ``set_aside_stale``: then they are moved to
    ``OUTPUT/stale/<date-time>/`` (with a warning, and named in the summary). OUTPUT is locked for the whole run
    (``OUTPUT.lock``, :class:`~spacy_pel.files.output_lock`, as build-kb's and train's): a second run into it
    is refused at once (:class:`~spacy_pel.files.OutputBusyError`). ``setup(nlp)`` runs
    in each actor after loading; ``on_shard(marker)`` after each shard is written. Returns the summary
    (also written to ``OUTPUT/summary.json``).
    """
    started = time.perf_counter()
    if batch_size < 1 or cpus_per_worker < 1 or (workers is not None and workers < 1):
        raise files.InputError("--batch-size, --workers and --cpus-per-worker must be at least 1")
    output, pipeline = Path(output), Path(pipeline).resolve()
    with files.output_lock(output) as lock:  # a second run into OUTPUT is refused before any marker is read
        shards = find_shards(input, leave_out=(output, lock.path))  # OUTPUT may be a folder inside INPUT
        stamp = out.pipeline_stamp(pipeline)
        stale = out.stale(output, [s.name for s in shards])
        # every finished shard there, of this input or not (but those to be set aside)
        out.check_pipeline(output, [m for m in out.all_markers(output) if not (set_aside_stale and m.get("shard") in stale)], stamp)
        if not set_aside_stale:
            refuse_stale(output, input, stale)
        inputs = {s.name: s.stamp() for s in shards}  # each input as planned: what its marker records
        markers: Dict[str, dict] = {}
        todo = []
        for shard in shards:
            marker = out.finished(output, shard, inputs[shard.name])
            if marker is None:
                todo.append(shard)
            else:
                markers[shard.name] = marker
        chunks = {s.name: plan_chunks(s, batch_size) for s in todo}
        check_pipeline(pipeline, todo, chunks)
        aside = out.set_aside(output, stale) if stale else None
        if aside is not None:
            log.warning(f"{len(stale)} shard(s) of {output} not in {input} set aside in {aside}: {', '.join(stale[:3])}"
                        f"{', …' if len(stale) > 3 else ''}")
        log.info(f"{len(shards)} shard(s): {len(markers)} finished before, {len(todo)} to link")
        done_now: List[dict] = []
        if todo:
            results = {s.name: out.ShardResult(s, sum(c.count for c in chunks[s.name]), stamp, inputs[s.name]) for s in todo}
            started_ray = connect(address, num_cpus)
            try:
                done_now = _run(chunks, results, output, pipeline, workers, cpus_per_worker, batch_size, progress, setup, on_shard)
            finally:
                if started_ray:
                    import ray

                    ray.shutdown()
            markers.update({m["shard"]: m for m in done_now})
        seconds = time.perf_counter() - started
        now = out.totals(done_now)
        link_seconds = sum(m["link_seconds"] for m in done_now)
        summary = {
            **out.totals(list(markers.values())),
            "shards": len(shards), "shards_linked_now": len(done_now), "shards_skipped": len(shards) - len(todo),
            "this_run": {**now, "seconds": round(seconds, 2),
                         "mentions_per_s": round(now["mentions"] / seconds, 1) if seconds else 0.0,
                         "mentions_per_worker_s": round(now["mentions"] / link_seconds, 1) if link_seconds else 0.0},
            "set_aside": {"shards": stale, "folder": None if aside is None else str(aside)},
            "output": str(output),
        }
        out.write_summary(output, summary)
    return summary


def _run(chunks, results, output, pipeline, workers, cpus_per_worker, batch_size, progress, setup, on_shard) -> List[dict]:
    import ray
    from ray.data import DataContext

    if workers is None:
        workers = max(1, int(ray.cluster_resources().get("CPU", 1) // cpus_per_worker))
    ctx = DataContext.get_current()
    saved = (ctx.enable_progress_bars, ctx.max_errored_blocks)
    ctx.enable_progress_bars, ctx.max_errored_blocks = progress, -1
    done: List[dict] = []

    def finish(result: out.ShardResult) -> None:
        marker = result.write(output)
        done.append(marker)
        log.info(f"{marker['shard']}: {marker['docs']} docs, {marker['mentions']} mentions, {marker['errors']} errors")
        if on_shard is not None:
            on_shard(marker)

    try:
        for name, result in results.items():  # shards without any document are finished already
            if result.complete:
                finish(result)
        todo = [c for name in results for c in chunks[name] if not results[name].complete]
        for alone in (False, True):  # the documents of batches Ray could not run get a second pass, each alone
            if not todo:
                break
            ds = _dataset(todo, pipeline, workers, cpus_per_worker, batch_size, setup, alone)
            for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=0):
                for doc in batch.to_pylist():
                    result = results[doc["shard"]]
                    if result.complete:
                        continue
                    result.add(doc["seq"], doc)
                    if result.complete:
                        finish(result)
            todo = [one for c in todo if not results[c.shard].complete for one in split_chunk(c)
                    if one.first_seq not in results[c.shard].docs]
            if todo and not alone:
                log.warning(f"{len(todo)} document(s) of batches that failed in Ray: linking them again, one by one")
        for name, result in results.items():
            if not result.complete:
                _lost(chunks[name], result)
                finish(result)
    finally:
        ctx.enable_progress_bars, ctx.max_errored_blocks = saved
    return done
