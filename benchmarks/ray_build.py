"""build-kb / build-names on Ray (issue 31): all of MeSH and its name rows encoded with ``--ray`` by 1
and 2 local workers beside the local build, the results compared, a Ray build killed with SIGKILL and
resumed, and a projection to a UMLS-size KB (3.3M concepts, 10M names) from the measured rate per core.

    python benchmarks/ray_build.py [--kb SHARED/mesh --format mesh] [--encoder all-MiniLM-L6-v2]
    python benchmarks/ray_build.py --limit 2000 --chunk-size 250 --names-chunk-size 500 --out /tmp/ray_smoke  # a smoke test

Every build is the command a user runs (``python -m spacy_pel build-kb … [--ray --workers N]``, then
``build-names``) in a fresh process: a Ray build's wall time includes starting Ray on this machine
(``ray.init()``, all its CPUs) and loading the encoder in each actor (1 CPU and 1 torch thread each);
the local build uses ``--threads`` torch threads (default: every core). Outputs are compared with the
local build's: the same ids and records (KB) or names and entity rows (name index), every vector's
cosine, the encoder fingerprint, ``meta.json`` and the KB's ``stamp.json``. The kill check starts a Ray
build with the most workers, sends SIGKILL to its driver once a third of the chunks have their
completion marker, runs the same command again and compares the result with the uninterrupted Ray
build. The BC5CDR dev check encodes the gold mentions once and takes the top-1 entity from the local
and the Ray KB (R@1 over mentions whose gold id is in the KB). ``--limit N`` builds from the KB's first
N records only (written as JSONL). Run it alone: two torch jobs on 2 cores more than halve each other.
Writes OUT.json and OUT.md (default benchmarks/ray_build).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import typer

from _common import HERE, ROOT, SHARED, lscpu_model, machine
from spacy_pel.corpora import read_pubtator
from spacy_pel.kb import read_kb
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.pieces import Mention
from spacy_pel.retrieval.chunks import CHUNK
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.retrieval.names import NameIndex

UMLS_CONCEPTS, UMLS_NAMES = 3_300_000, 10_000_000
DEV = SHARED / "bc5cdr" / "CDR_DevelopmentSet.PubTator.txt"
GRID = ((2, 1), (16, 1), (16, 4), (64, 4), (64, 16))  # (cores per node, nodes) of the projection


def cli_env(threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false"}
    env.setdefault("RAY_raylet_start_wait_time_s", "300")  # Ray's 30 s is short on busy cores
    return env


def spacy_pel_args(kind: str, source: Path, out: Path, a: dict, workers: int) -> List[str]:
    """The command line of a KB build (``kind="kb"``, ``source`` the KB file) or a name-index build
    (``"names"``, ``source`` the KB folder); ``workers`` 0: local."""
    if kind == "kb":
        args = ["build-kb", "--kb", str(source), "--format", a["format"], "--encoder", a["encoder"], "-o", str(out),
                "--chunk-size", str(a["chunk_size"]), "--precision", a["precision"]]
    else:
        args = ["build-names", str(source), "-o", str(out), "--chunk-size", str(a["names_chunk_size"]),
                "--precision", a["precision"]]
    return args + (["--ray", "--workers", str(workers), "--cpus-per-worker", "1"] if workers else [])


def run(args: List[str], threads: int, out: Path, log: Path) -> dict:
    """Run ``python -m spacy_pel ARGS`` to the end; its wall time and ``out/build_report.json``."""
    start = time.perf_counter()
    with log.open("w") as err:
        proc = subprocess.run([sys.executable, "-m", "spacy_pel", *args], cwd=ROOT, env=cli_env(threads),
                              stdout=subprocess.DEVNULL, stderr=err)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {log.read_text()[-3000:]}")
    report = json.loads((out / "build_report.json").read_text())
    resume = report.get("resume", {})
    count = report.get("entities_encoded", report.get("names_encoded"))
    return {"wall_s": round(wall, 1), "encode_s": report["encode_s"], "encoded": count,
            "per_s": round(count / max(report["encode_s"], 1e-9), 1), "ray": resume.get("ray"),
            "reused_chunks": resume.get("reused_chunks", 0), "chunks": resume.get("chunks")}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)


def same_kb(a: Path, b: Path) -> dict:
    left, right = EntityIndex.from_disk(a), EntityIndex.from_disk(b)
    cos = cosines(left.embeddings, right.embeddings) if len(left) == len(right) else np.zeros(1)
    meta = [json.loads((p / "meta.json").read_text()) for p in (a, b)]
    stamp = [json.loads((p / "stamp.json").read_text()) for p in (a, b)]
    return {"rows": len(right), "same_ids_and_records": [e.to_dict() for e in left.entities] == [e.to_dict() for e in right.entities],
            "min_cosine": round(float(cos.min()), 6), "bitwise_equal": bool(np.array_equal(left.embeddings, right.embeddings)),
            "same_fingerprint": meta[0]["encoder_fingerprint"] == meta[1]["encoder_fingerprint"],
            "same_meta": meta[0] == meta[1], "same_stamp": stamp[0] == stamp[1]}


def same_names(a: Path, b: Path) -> dict:
    left, right = NameIndex.from_disk(a), NameIndex.from_disk(b)
    rows = np.arange(len(right))
    cos = cosines(left.name_vectors(rows).numpy(), right.name_vectors(rows).numpy()) if len(left) == len(right) else np.zeros(1)
    meta = [json.loads((p / "meta.json").read_text()) for p in (a, b)]
    return {"rows": len(right), "same_names": left.names == right.names,
            "same_entity_rows": bool(np.array_equal(left.entity_rows, right.entity_rows)),
            "min_cosine": round(float(cos.min()), 6), "same_fingerprint": left.fingerprint == right.fingerprint,
            "same_meta": meta[0] == meta[1]}


def dev_r1(kbs: Dict[str, Path], encoder: str, precision: str, dev_docs: int) -> dict:
    """R@1 on BC5CDR dev's gold mentions whose id is in the KB: mentions encoded once, searched in each KB."""
    docs = read_pubtator(DEV)[: dev_docs or None]
    first = EntityIndex.from_disk(next(iter(kbs.values())))
    pairs = [(Mention(d.text, a.start, a.end), a.ids) for d in docs for a in d.annotations
             if any(first.resolve(i) is not None for i in a.ids)]
    out = {"docs": len(docs), "mentions_in_kb": len(pairs)}
    if not pairs:
        return out
    vectors = BiEncoder.from_pretrained(encoder, precision=precision).encode_mentions([m for m, _ in pairs])
    for name, path in kbs.items():
        index = EntityIndex.from_disk(path)
        _, rows = index.search(vectors, 1)
        hits = sum(int(rows[n, 0]) in {index.resolve(i) for i in ids} for n, (_, ids) in enumerate(pairs))
        out[name] = round(hits / len(pairs), 4)
    return out


def kill_and_resume(kb_file: Path, work: Path, a: dict, workers: int, reference: Path) -> dict:
    """A Ray build killed with SIGKILL once a third of its chunks are done, then run again."""
    out, partial = work / "kb_killed", work / "kb_killed.partial"
    args = spacy_pel_args("kb", kb_file, out, a, workers)
    chunks = -(-a["entities"] // a["chunk_size"])
    target = max(1, chunks // 3)
    with (work / "killed.log").open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "spacy_pel", *args], cwd=ROOT, env=cli_env(1),
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        while len(list(partial.glob("chunk_*.done"))) < target and proc.poll() is None:
            time.sleep(0.2)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)  # the driver only, as `kill -9 PID`
        proc.wait()
    if proc.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}) before it could be killed: "
                           f"{(work / 'killed.log').read_text()[-3000:]}")
    time.sleep(10)  # Ray's own processes stop when their driver is gone; any left are stopped here
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    done = len(list(partial.glob("chunk_*.done")))
    resumed = run(args, 1, out, work / "resumed.log")
    return {"killed_after_chunks": done, "chunks": chunks, "killed_by_sigkill": proc.returncode == -signal.SIGKILL,
            "resumed": resumed, "vs_uninterrupted_ray_build": same_kb(reference, out)}


def projection(per_core_entities: float, per_core_names: float, driver_s: float, mesh_total: int) -> dict:
    """Hours for 3.3M concepts + 10M names: encoding divided over the cores, the driver's part (reading,
    tokenising, assembling the index: one process) scaled by the record count from this run."""
    driver_h = driver_s * (UMLS_CONCEPTS + UMLS_NAMES) / max(mesh_total, 1) / 3600
    core_h = (UMLS_CONCEPTS / per_core_entities + UMLS_NAMES / per_core_names) / 3600
    rows = [{"cores_per_node": c, "nodes": n, "encode_h": round(core_h / (c * n), 2), "driver_h": round(driver_h, 2),
             "total_h": round(core_h / (c * n) + driver_h, 2)} for c, n in GRID]
    return {"label": "PROJECTION from the measured rate per core, not a measurement",
            "entities_per_core_s": round(per_core_entities, 1), "names_per_core_s": round(per_core_names, 1),
            "core_hours": round(core_h, 1), "driver_hours": round(driver_h, 2), "rows": rows}


def main(
    kb: Path = typer.Option(SHARED / "mesh", "--kb", help="KB file or folder (MeSH: the folder of both TSVs)"),
    format: str = typer.Option("mesh", "--format"),
    encoder: str = typer.Option("all-MiniLM-L6-v2", "--encoder"),
    precision: str = typer.Option("auto", "--precision"),
    limit: int = typer.Option(0, "--limit", help="Only the KB's first N records (0: all), for a smoke test"),
    chunk_size: int = typer.Option(CHUNK, "--chunk-size", help="Entities per chunk"),
    names_chunk_size: int = typer.Option(CHUNK, "--names-chunk-size", help="Names per chunk"),
    workers: str = typer.Option("1,2", "--workers", help="Ray worker counts to measure"),
    threads: int = typer.Option(os.cpu_count() or 1, "--threads", help="Torch threads of the local build"),
    dev_docs: int = typer.Option(0, "--dev-docs", help="BC5CDR dev documents for the R@1 check (0: all; -1: skip)"),
    work: Optional[Path] = typer.Option(None, "--work", help="Folder for the builds (default: a temporary one, removed)"),
    out: Path = typer.Option(HERE / "ray_build", "--out", help="Report stem: writes OUT.json and OUT.md"),
    kill: bool = typer.Option(True, "--kill/--no-kill", help="Run the kill -9 and resume check (one more Ray KB build)"),
    notes: str = typer.Option("", "--notes", help="A paragraph for the report (what else ran on the machine, …)"),
    render: bool = typer.Option(False, "--render", help="Only rewrite OUT.md from OUT.json (with --notes)"),
):
    if render:
        report = json.loads(out.with_suffix(".json").read_text(encoding="utf8"))
        report["notes"] = notes or report.get("notes", "")
        out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
        out.with_suffix(".md").write_text(markdown(report), encoding="utf8")
        return
    counts = [int(w) for w in workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="pel-ray-build-") as tmp:
        work = Path(work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        kb_file, fmt = kb, format
        entities = read_kb(kb, format)
        if limit:
            entities, kb_file, fmt = entities[:limit], work / f"kb_first_{limit}.jsonl", "jsonl"
            kb_file.write_text("".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in entities), encoding="utf8")
        a = {"format": fmt, "encoder": encoder, "precision": precision, "chunk_size": chunk_size,
             "names_chunk_size": names_chunk_size, "entities": len(entities)}
        del entities
        runs = {}
        for label, w in [("local", 0)] + [(f"ray_{w}", w) for w in counts]:
            kb_out, names_out = work / f"kb_{label}", work / f"names_{label}"
            t = threads if not w else 1
            runs[label] = {"workers": w, "kb": run(spacy_pel_args("kb", kb_file, kb_out, a, w), t, kb_out, work / f"kb_{label}.log"),
                           "names": run(spacy_pel_args("names", kb_out, names_out, a, w), t, names_out, work / f"names_{label}.log")}
            if w:
                runs[label]["kb_vs_local"] = same_kb(work / "kb_local", kb_out)
                runs[label]["names_vs_local"] = same_names(work / "names_local", names_out)
        most = f"ray_{max(counts)}"
        killed = kill_and_resume(kb_file, work, a, max(counts), work / f"kb_{most}") if kill else None
        r1 = dev_r1({"local": work / "kb_local", most: work / f"kb_{most}"}, encoder, precision, dev_docs) if dev_docs >= 0 else None
    report = {**make_report(runs, counts, killed, r1, a, kb, limit, threads), "notes": notes}
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    out.with_suffix(".md").write_text(markdown(report), encoding="utf8")
    print(markdown(report))


def make_report(runs: dict, counts: List[int], killed: Optional[dict], r1: Optional[dict], a: dict, kb: Path, limit: int, threads: int) -> dict:
    one, two = runs.get("ray_1"), runs.get("ray_2")
    scaling = {k: round(two[k]["per_s"] / one[k]["per_s"], 2) for k in ("kb", "names")} if one and two else None
    best = runs[f"ray_{max(counts)}"]
    cores = max(counts)  # one worker per core
    names_total = best["names_vs_local"]["rows"]
    driver_s = sum(best[k]["wall_s"] - best[k]["encode_s"] for k in ("kb", "names"))
    return {
        "machine": {**machine(), "lscpu_model": lscpu_model()},
        "input": {"kb": str(kb), "format": a["format"], "limit": limit, "entities": a["entities"], "names": names_total,
                  "encoder": a["encoder"], "precision": a["precision"], "chunk_size": a["chunk_size"],
                  "names_chunk_size": a["names_chunk_size"], "local_threads": threads},
        "runs": runs, "scaling_1_to_2_workers": scaling, "kill_and_resume": killed, "bc5cdr_dev_r1": r1,
        "projection": projection(best["kb"]["per_s"] / cores, best["names"]["per_s"] / cores, driver_s,
                                 a["entities"] + names_total),
    }


def markdown(r: dict) -> str:
    m, i, p, k = r["machine"], r["input"], r["projection"], r["kill_and_resume"]
    subset = f"the first {i['limit']:,} records of {i['kb']}" if i["limit"] else f"all of {i['kb']}"
    lines = [
        "# Building the KB and its name rows on Ray: MeSH on this machine, and a projection for a UMLS-size KB",
        "",
        "Reproduce: `python benchmarks/ray_build.py" + (f" --limit {i['limit']}" if i["limit"] else "")
        + ("" if k is not None else " --no-kill") + "` "
        "(alone on the machine; benchmarks/ray_build.py's docstring has the protocol).",
        "",
        f"Machine: {m['lscpu_model'] or m['cpu']}, flags {', '.join(m['flags']) or 'none of note'}; torch {m['torch']}, "
        f"python {m['python']}. Input: {subset} ({i['entities']:,} entities, {i['names']:,} name rows), encoder "
        f"{i['encoder']}, precision {i['precision']}, chunks of {i['chunk_size']:,} entities / {i['names_chunk_size']:,} "
        f"names. Local: one process, {i['local_threads']} torch thread(s). Ray: a fresh local Ray per command, "
        "each worker an actor with 1 CPU and 1 torch thread. Wall: the whole command; encode: from the driver's "
        "encoder loaded to the last chunk written (Ray: including starting Ray and loading the encoder in every "
        "actor).",
        "",
        "| build | workers | wall s | encode s | rows/s (encode) | same ids / rows | min cosine vs local | same fingerprint |",
        "|---|---:|---:|---:|---:|---|---:|---|",
    ]
    for label, run in r["runs"].items():
        for kind, what in (("kb", "KB"), ("names", "name rows")):
            x, cmp = run[kind], run.get(f"{kind}_vs_local")
            same = "—" if cmp is None else ("yes" if cmp.get("same_ids_and_records", cmp.get("same_names")) and
                                             cmp.get("same_entity_rows", True) else "**no**")
            cos = "—" if cmp is None else f"{cmp['min_cosine']:.6f}"
            fp = "—" if cmp is None else ("yes" if cmp["same_fingerprint"] and cmp["same_meta"] else "**no**")
            lines.append(f"| {what}, {label.replace('_', ' ')} | {run['workers'] or '—'} | {x['wall_s']} | {x['encode_s']} | "
                         f"{x['per_s']:,} | {same} | {cos} | {fp} |")
    s = r["scaling_1_to_2_workers"]
    lines += [
        "",
        (f"1 → 2 workers (encoding rate): ×{s['kb']} for the KB, ×{s['names']} for the name rows." if s else ""),
        "",
    ]
    if k is None:
        lines += ["**kill -9 and resume**: not run in this report (`--no-kill`); benchmarks/ray_build.md measures it "
                  "on the first 40,000 MeSH records.", ""]
    else:
        v = k["vs_uninterrupted_ray_build"]
        lines += [
        f"**kill -9 and resume**: the driver of a {max(x['workers'] for x in r['runs'].values())}-worker Ray build "
        f"killed with SIGKILL ({'yes' if k['killed_by_sigkill'] else 'no: it had finished'}) after "
        f"{k['killed_after_chunks']} of {k['chunks']} chunks had their marker; the same command again reused "
        f"{k['resumed']['reused_chunks']} chunks, encoded {k['resumed']['encoded']:,} entities in {k['resumed']['wall_s']} s; "
        f"against the uninterrupted Ray build: same ids and records {v['same_ids_and_records']}, vectors bit for bit "
        f"{v['bitwise_equal']} (min cosine {v['min_cosine']:.6f}), same meta {v['same_meta']}, same stamp {v['same_stamp']}.",
        "",
        ]
    d = r["bc5cdr_dev_r1"]
    if d and d.get("mentions_in_kb"):
        ray_key = next(x for x in d if x.startswith("ray_"))
        lines += [f"**BC5CDR dev R@1** ({d['mentions_in_kb']:,} gold mentions of {d['docs']} documents whose id is in "
                  f"the KB; the untrained encoder): local KB {d['local']:.4f}, Ray KB {d[ray_key]:.4f}.", ""]
    elif d:
        lines += [f"BC5CDR dev R@1: none of the gold ids of {d['docs']} documents is in this KB.", ""]
    lines += [
        f"## {p['label']}: {UMLS_CONCEPTS:,} concepts and {UMLS_NAMES:,} name rows",
        "",
        f"From the measured rates of the {max(x['workers'] for x in r['runs'].values())}-worker Ray builds on this machine "
        f"(one worker per core): **{p['entities_per_core_s']:,} entities/s and {p['names_per_core_s']:,} names/s per "
        f"core**, so ~{p['core_hours']:,} core-hours of encoding. The driver's share (reading the KB, tokenising the "
        f"names, assembling the table and index: one process, measured here as wall − encode time, so an upper bound: "
        f"it includes starting the process) is scaled by the record count: ~{p['driver_hours']} h whatever the cluster. Assumed, not measured: other nodes' cores encode "
        "at this rate (same CPU family and precision), UMLS records and names have MeSH's lengths, the driver holds "
        "every vector in memory (3.3M × 384 float32 ≈ 5 GB, 10M names ≈ 15 GB) and shared storage keeps up.",
        "",
        "| cores per node | nodes | encoding h | driver h | total h |",
        "|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {x['cores_per_node']} | {x['nodes']} | {x['encode_h']} | {x['driver_h']} | {x['total_h']} |" for x in p["rows"]]
    if r.get("notes"):
        lines += ["", r["notes"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    typer.run(main)
