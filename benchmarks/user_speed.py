"""Speed as a user gets it: ``nlp.pipe`` over BC5CDR dev gold mentions, in a fresh process, first pass.

Each measurement runs in its own fresh Python process: ``spacy.load(PIPELINE)`` (timed apart), an
untimed warm-up on the first 20 documents, then ONE timed pass of ``nlp.pipe`` over the other 480
documents (never linked before in that process) with spaCy's default batch size, ``n_process`` 1 or 2.
The gold spans are set as ``doc.ents`` first (mention linking, as issue 28 and the maintainers measure);
R@1 is over the in-KB mentions of those documents, as evaluate counts them (an alternative id as its
entity's). With ``n_process=2`` the kb_ids must equal the one-process run's (issue 32): the report says
how many differ. ``--small-batches`` links the same
documents again with ``batch_size`` 4 and 1 (untimed) and counts the kb_ids that differ from the timed
pass's: answers that depend on batching (dynamic int8).

    python benchmarks/user_speed.py run --pipeline training/pipeline --n-process 1 --n-process 2

Why ``benchmarks/speed.md`` differs: it times the median of repeated passes over the same documents
with ``batch_size=128`` in a long-lived process (``--warm-passes 3`` measures that way too: on the Zen 4 of
session 16 it is slower than the first pass, 1,418 vs 1,566 mentions/s), and its 2,354/s came from session
12's newer CPU (avx_vnni): the mention tower's cost per open mention is what differs between machines.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import spacy
import torch
import typer

from _common import (
    ROOT,
    cpu_seconds,
    linked_r1,
    lscpu_model,
    machine,
    machine_line,
    others_busy,
    steal_seconds,
    with_gold_ents,
)
from spacy_pel.corpora import gold_spans, read_docbin
from spacy_pel.pipeline.linker import find_linker

WARMUP_DOCS = 20
app = typer.Typer(add_completion=False)


def overrides(settings: List[str]) -> dict:
    """``KEY=VALUE`` strings as a spaCy config overrides dict (values parsed as JSON where they parse)."""
    out = {}
    for item in settings:
        key, _, value = item.partition("=")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def differing(ids: List[str], other: List[str]) -> int:
    """How many positions of two kb_id lists differ (a missing or extra id counts as one)."""
    return sum(a != b for a, b in zip(ids, other)) + abs(len(ids) - len(other))


@app.command(hidden=True)
def child(pipeline: Path, dev: Path, n_process: int, ids_out: Path, setting: List[str] = typer.Option([], "--set"),
          warm_passes: int = 0, small_batches: bool = False):
    """One measurement (run by ``run`` in a fresh process)."""
    t0 = time.perf_counter()
    nlp = spacy.load(pipeline, config=overrides(setting))
    load_seconds = time.perf_counter() - t0
    docs = read_docbin(nlp, dev)
    t_warm = time.perf_counter()
    list(nlp.pipe(with_gold_ents(docs[:WARMUP_DOCS])))
    warmup_seconds = time.perf_counter() - t_warm
    timed = docs[WARMUP_DOCS:]
    fresh = with_gold_ents(timed)
    gflops = host_gflops()
    c0, s0, t0 = cpu_seconds(), steal_seconds(), time.perf_counter()
    linked = list(nlp.pipe(fresh, n_process=n_process))
    seconds = time.perf_counter() - t0
    c1, steal = cpu_seconds(), round((steal_seconds() - s0) / seconds, 2)  # the timed pass's, before any warm pass
    warm = []
    for _ in range(warm_passes):  # speed.md's way: the same documents again, batch_size 128, this process's caches warm
        t1 = time.perf_counter()
        list(nlp.pipe(with_gold_ents(timed), batch_size=128))
        warm.append(time.perf_counter() - t1)
    busy = others_busy(c0, c1, seconds)  # with n_process > 1 the workers are not this process's
    own = round((c1[1] - c0[1]) / seconds, 2)  # cores this process kept busy: < 2 while it waited
    r1 = linked_r1(find_linker(nlp)[1], timed, linked)  # evaluate's definitions; R@1 None without an in-KB mention
    ids = [p.kb_id_ for gold_doc, doc in zip(timed, linked) for _, p in zip(gold_spans(gold_doc), doc.ents)]
    ids_out.write_text(json.dumps(ids), encoding="utf8")
    result = {"n_process": n_process, "load_seconds": round(load_seconds, 1), "warmup_seconds": round(warmup_seconds, 1),
              "docs": len(timed), "mentions": len(ids),
              "seconds": round(seconds, 2), "mentions_per_s": round(len(ids) / seconds, 1), "steal_cores": steal,
              "host_gflops": gflops,
              "R@1": r1["R@1"], "in_kb": r1["in_kb"],
              "ids_sha1": hashlib.sha1("\n".join(ids).encode()).hexdigest()[:12]}
    if n_process == 1:
        result["other_processes_cores"] = busy
        result["own_cores"] = own
    if small_batches and n_process == 1:
        for size in (4, 1):
            again = [e.kb_id_ for doc in nlp.pipe(with_gold_ents(timed), batch_size=size) for e in doc.ents]
            result[f"kb_ids_differing_batch_{size}"] = differing(ids, again)
    if warm:
        result["warm_mentions_per_s"] = round(len(ids) / sorted(warm)[len(warm) // 2], 1)
    if setting:
        result["settings"] = list(setting)
    typer.echo(json.dumps(result))


@app.command()
def run(pipeline: List[Path] = typer.Option(..., help="Pipeline folder(s)"),
         n_process: List[int] = typer.Option([1, 2], help="nlp.pipe n_process values"),
         dev: Path = typer.Option(ROOT / "corpus" / "bc5cdr_dev.spacy"),
         output: Path = typer.Option(ROOT / "benchmarks" / "user_speed", help="Report path without suffix"),
         work: Path = typer.Option(Path("/tmp/pel_user_speed")), notes: str = typer.Option(""),
         setting: List[str] = typer.Option([], "--set", help="KEY=VALUE config override for every pipeline, e.g. "
                                                               "components.pel_linker.precision=int8"),
         warm_passes: int = typer.Option(0, help="after the timed first pass, this many passes over the same documents "
                                                "with batch_size 128 (speed.md's way); their median is reported too"),
         append: bool = typer.Option(False, help="add these runs to the report's instead of replacing them"),
         cold: bool = typer.Option(False, help="before each run, drop the pipeline's files from the OS page cache "
                                               "(a first run after a reboot, a copy or an install)"),
         label: str = typer.Option("", help="a word for these runs in the report's settings column, e.g. the code's commit"),
         small_batches: bool = typer.Option(False, help="with n_process 1: link the documents again at batch_size 4 and 1 "
                                                        "and count the kb_ids that differ from the timed pass's")):
    """Measure every pipeline at every n_process, each in a fresh process, and write the report."""
    missing = [f"{what} {path}" for what, path in [*(("pipeline", p) for p in pipeline), ("--dev corpus", dev)] if not path.exists()]
    if missing:
        raise typer.BadParameter(f"not found: {', '.join(missing)}")
    work.mkdir(parents=True, exist_ok=True)
    old = json.loads(output.with_suffix(".json").read_text()) if append and output.with_suffix(".json").exists() else {}
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "notes": notes or old.get("notes", ""),
              "runs": old.get("runs", [])}
    extra = [a for item in setting for a in ("--set", item)] + ["--warm-passes", str(warm_passes)]
    extra += ["--small-batches"] if small_batches else []
    for p in pipeline:
        ids_by_n = {}
        for n in n_process:
            ids_file = work / f"{p.name}_{n}.json"
            if cold:
                evict(p)
            out = measure_in_child([str(p), str(dev), str(n), str(ids_file), *extra])
            run = {"pipeline": str(p), **json.loads(out.strip().splitlines()[-1])}
            run["settings"] = [*([label] if label else []), *(["cold page cache"] if cold else []), *run.get("settings", [])]
            ids_by_n[n] = json.loads(ids_file.read_text())
            if n != n_process[0]:
                first = ids_by_n[n_process[0]]
                run["kb_ids_differing_from_first"] = differing(first, ids_by_n[n])
            report["runs"].append(run)
    output.with_suffix(".json").write_text(json.dumps(report, indent=2), encoding="utf8")
    output.with_suffix(".md").write_text(markdown(report), encoding="utf8")


def measure_in_child(args: List[str]) -> str:
    """``user_speed.py child ARGS`` in a fresh process: its stdout; a failure ends the run with the child's
    own last error line (its traceback's), not a CalledProcessError that says only which command failed."""
    env = {**os.environ, "TYPER_STANDARD_TRACEBACK": "1"}  # a plain traceback: its last line is the whole error
    done = subprocess.run([sys.executable, __file__, "child", *args], capture_output=True, text=True, env=env)
    if done.returncode:
        why = next((ln.strip() for ln in reversed(done.stderr.splitlines()) if ln.strip()), f"exit status {done.returncode}")
        raise SystemExit(f"user_speed.py: the measurement of {args[0]} at n_process {args[2]} failed: {why}")
    return done.stdout


def evict(folder: Path) -> None:
    """Drop every file under ``folder`` from the OS page cache (``posix_fadvise`` DONTNEED: no root needed)."""
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def host_gflops(size: int = 512, seconds: float = 1.0) -> float:
    """The host's float32 matrix-product rate just before a timed pass (GFLOP/s, torch's threads): a
    virtual machine's cores run at another speed from one minute to the next, which steal time does not
    show; a run's mentions/s read beside it."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        n += 1
    return round(2 * size ** 3 * n / (time.perf_counter() - t0) / 1e9, 1)


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = ["# Speed as a user gets it: `nlp.pipe`, fresh process, first pass", "",
             machine_line(m) + ".", "",
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             "| pipeline | settings | n_process | load s | warm-up s | docs | mentions | seconds | mentions/s | warm passes, mentions/s | R@1 (in-KB) | kb_ids ≠ n_process=1 | kb_ids ≠ at batch_size 4 / 1 | other processes (cores) | this process (cores) | stolen by the host (cores) | host GFLOP/s before |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for run in r["runs"]:
        warm = f"{run['warm_mentions_per_s']:,.0f}" if "warm_mentions_per_s" in run else "–"
        r1 = "–" if run["R@1"] is None else f"{run['R@1']:.4f}"  # None: no timed mention had an in-KB gold id
        small = (f"{run['kb_ids_differing_batch_4']} / {run['kb_ids_differing_batch_1']}"
                 if "kb_ids_differing_batch_4" in run else "–")
        lines.append(f"| `{run['pipeline']}` | {', '.join(run.get('settings', [])) or 'as saved'} | {run['n_process']} | "
                     f"{run['load_seconds']} | {run.get('warmup_seconds', '–')} | {run['docs']} | {run['mentions']} | "
                     f"{run['seconds']} | **{run['mentions_per_s']:,.0f}** | {warm} | {r1} | "
                     f"{run.get('kb_ids_differing_from_first', '–')} | {small} | {run.get('other_processes_cores', '–')} | {run.get('own_cores', '–')} | {run.get('steal_cores', '–')} | {run.get('host_gflops', '–')} |")
    lines += ["", "Reproduce: `python benchmarks/user_speed.py run --pipeline P --n-process 1 --n-process 2` (one run a line; "
              "`--set KEY=VALUE` for a setting, `--warm-passes 3`, `--small-batches`, `--cold` to start each run with the pipeline's files out of "
              "the page cache, `--label` to name the code or host, `--append` to add rows).", "",
              __doc__.split("\n\n")[-1].replace("\n", " ").strip(), ""]
    if r.get("notes"):
        lines += [r["notes"], ""]
    return "\n".join(lines)


if __name__ == "__main__":
    app()
