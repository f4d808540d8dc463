"""A UMLS-size KB on a 2-core machine: 2.4M entities (MeSH + synthetic distractors), compressed indexes
against exact search — recall@1 of the trained retriever on BC5CDR dev, memory, build and search time.

    python benchmarks/large_kb.py --pipeline training/pipeline [--total 2400000]

No 2.4M-entity KB ships with the project and encoding one takes ~1 h here, so the 2,045,932 entities
added to MeSH's 354,068 are **synthetic vectors**: each mixes two random MeSH vectors and noise,
``normalize(v_a + u·v_b + 0.35·g)`` with ``u ~ U(0.2, 0.6)`` — they fall among real entities (median
cosine ~0.85 to their nearest MeSH entity), so they crowd the neighbourhoods a compressed index has to tell
apart. Recall@1 is the retriever's alone (no alias table or rules, which would hide index errors),
over all 2.4M rows, exact search vs each compressed index; "RAM" is the index's own size in memory.
Writes benchmarks/large_kb.json and benchmarks/large_kb.md. Run it alone.
"""
import json
import time
from pathlib import Path

import faiss
import numpy as np
import spacy
import torch
import typer

from _common import machine
from spacy_pel.corpora import gold_ids, gold_spans, read_docbin
from spacy_pel.kb import Entity
from spacy_pel.pipeline.linker import find_linker
from spacy_pel.retrieval.index import EntityIndex, make_ivfpq
from spacy_pel.retrieval.search import InMemoryVectors, RefinedSearch, VectorFile
from speed import measure_load  # the speed report's load/link run (benchmarks/ is on the path)

HERE = Path(__file__).resolve().parent


def distractors(table: np.ndarray, n: int, seed: int = 0, chunk: int = 200_000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((n, table.shape[1]), np.float32)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        a = table[rng.integers(0, len(table), m)].astype(np.float32)
        b = table[rng.integers(0, len(table), m)].astype(np.float32)
        g = rng.normal(size=a.shape).astype(np.float32) / np.sqrt(a.shape[1])
        x = a + rng.uniform(0.2, 0.6, (m, 1)).astype(np.float32) * b + 0.35 * g
        out[start : start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def exact_top(vectors: np.ndarray, queries: np.ndarray, k: int = 10) -> np.ndarray:
    matrix = torch.from_numpy(vectors)
    rows = []
    with torch.inference_mode():
        for start in range(0, len(queries), 64):
            q = torch.from_numpy(queries[start : start + 64])
            rows.append(torch.topk(q @ matrix.T, k, dim=1).indices.numpy())
    return np.concatenate(rows)


def recall(rows: np.ndarray, gold: list) -> float:
    return float(np.mean([r in g for r, g in zip(rows[:, 0], gold)]))


def main(
    pipeline: Path = typer.Option(..., help="a saved pipeline with pel_linker over the full MeSH KB"),
    dev: Path = typer.Option(Path("corpus/bc5cdr_dev.spacy")),
    total: int = typer.Option(2_400_000, help="entities in the synthetic KB (MeSH + distractors)"),
    configs: str = typer.Option("IVF4096,PQ96;IVF4096,PQ64;IVF4096,SQ8", help="FAISS factory strings, ;-separated"),
    nprobes: str = typer.Option("16,32,64,128"),
    refined: str = typer.Option("128,256,512", help="nprobe values for spacy_pel's ivfpq kind (top 100 rescored from disk)"),
    work: Path = typer.Option(Path("/tmp/pel_large_kb"), help="scratch folder: the 2.4M vectors as .npy (1.8 GB)"),
    whole_pipeline: bool = typer.Option(True, help="also save the 2.4M KB (ivfpq) and link dev with the whole pipeline over it"),
    saved_kb: Path = typer.Option(None, help="only re-measure the whole pipeline over this saved 2.4M KB"),
):
    report = {"machine": machine(), "total_entities": total}
    previous = json.loads((HERE / "large_kb.json").read_text()) if (HERE / "large_kb.json").exists() else {}
    if saved_kb is not None:  # only the whole-pipeline rows, over a 2.4M KB saved by an earlier run
        previous["pipeline"] = {**previous.get("pipeline", {}), **measure_pipelines(pipeline, dev, saved_kb)}
        return save(previous)
    if not configs and previous.get("total_entities") == total:
        report["indexes"] = previous.get("indexes", [])  # the raw FAISS rows of an earlier run, kept
    nlp = spacy.load(pipeline)
    _, linker = find_linker(nlp)
    linker.ensure_loaded()
    mesh = np.asarray(linker.index.embeddings, dtype=np.float32)
    mesh_table = linker.index.entities
    docs = read_docbin(spacy.blank("en"), dev)
    spans = [[(s.start, s.end, s.label_) for s in gold_spans(d)] for d in docs]
    gold_all = [gold_ids(s.kb_id_) for d in docs for s in gold_spans(d)]
    keep = [i for i, ids in enumerate(gold_all) if any(x in linker.index.row for x in ids)]
    gold = [{linker.index.row[x] for x in gold_all[i] if x in linker.index.row} for i in keep]
    t0 = time.perf_counter()
    queries = np.ascontiguousarray(linker.mention_vectors(docs, spans)[keep], dtype=np.float32)
    report["mentions"] = {"in_kb": len(keep), "encode_s": round(time.perf_counter() - t0, 1)}
    del nlp, linker
    t0 = time.perf_counter()
    extra = distractors(mesh, total - len(mesh))
    vectors = np.concatenate([mesh, extra])
    del extra
    nearest = exact_top(mesh, vectors[len(mesh) :: 1000], 1)  # a sample's nearest MeSH entity
    cos = np.einsum("ij,ij->i", vectors[len(mesh) :: 1000], mesh[nearest[:, 0]])
    report["distractors"] = {"made_s": round(time.perf_counter() - t0, 1), "median_cos_to_nearest_mesh": round(float(np.median(cos)), 3)}
    t0 = time.perf_counter()
    exact = exact_top(mesh, queries)
    report["exact_mesh_only"] = {"R@1": round(recall(exact, gold), 4)}
    exact = exact_top(vectors, queries)
    report["exact"] = {"R@1": round(recall(exact, gold), 4), "search_s": round(time.perf_counter() - t0, 1),
                       "ram_mb_fp32": round(vectors.nbytes / 2**20), "ram_mb_bf16": round(vectors.nbytes / 2**21)}
    save(report)
    work.mkdir(parents=True, exist_ok=True)
    np.save(work / "embeddings.npy", vectors.astype(np.float16))
    t0 = time.perf_counter()
    refined_index = make_ivfpq(vectors)
    row = {"factory": f"ivfpq (spacy_pel): {refined_index.nlist} lists, PQ{refined_index.pq.M}, top 100 rescored from disk",
           "build_s": round(time.perf_counter() - t0, 1), "ram_mb": round(faiss.serialize_index(refined_index).nbytes / 2**20),
           "runs": []}
    search = RefinedSearch(refined_index, VectorFile(work / "embeddings.npy"), refine=100)
    for nprobe in [int(p) for p in refined.split(",") if p]:
        search.set_nprobe(nprobe)
        t0 = time.perf_counter()
        _, found = search.search(queries, 10)
        row["runs"].append(run_row("nprobe", nprobe, found, time.perf_counter() - t0, gold, exact, report))
    report["refined"] = row
    save(report)
    if whole_pipeline:
        report["pipeline"] = pipeline_on_large_kb(pipeline, dev, mesh_table, vectors, refined_index, work)
        save(report)
    del refined_index, search
    report.setdefault("indexes", [])
    rng = np.random.default_rng(1)
    for factory in [c for c in configs.split(";") if c]:
        t0 = time.perf_counter()
        index = faiss.index_factory(vectors.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
        if not index.is_trained:
            index.train(vectors[rng.choice(len(vectors), 160_000, replace=False)])
        index.add(vectors)
        row = {"factory": factory, "build_s": round(time.perf_counter() - t0, 1),
               "ram_mb": round(faiss.serialize_index(index).nbytes / 2**20), "runs": []}
        settings = [("nprobe", int(p)) for p in nprobes.split(",")] if "IVF" in factory else [("efSearch", e) for e in (64, 128, 256)]
        for name, value in settings:
            faiss.ParameterSpace().set_index_parameter(index, name, value)
            t0 = time.perf_counter()
            _, found = index.search(queries, 10)
            row["runs"].append(run_row(name, value, found, time.perf_counter() - t0, gold, exact, report))
        report["indexes"].append(row)
        save(report)
        del index


def pipeline_on_large_kb(pipeline: Path, dev: Path, mesh_table, vectors: np.ndarray, index, work: Path) -> dict:
    """Save the 2.4M-entity KB (MeSH records + named synthetic entities, ivfpq) and run the whole
    pipeline (rules included) over it in a fresh process, and over its own MeSH KB for comparison."""
    entities = list(mesh_table) + [Entity(f"SYN{i:07d}", f"synthetic entity {i}", [], ["Synthetic"])
                                   for i in range(len(vectors) - len(mesh_table))]
    kb = EntityIndex(entities, vectors, metric="cosine", fingerprint=json.loads((pipeline / "pel_linker" / "kb" / "meta.json")
                     .read_text())["encoder_fingerprint"], kind="ivfpq",
                     searcher=RefinedSearch(index, InMemoryVectors(vectors.astype(np.float16))))
    t0 = time.perf_counter()
    kb.to_disk(work / "kb")
    out = {"kb_save_s": round(time.perf_counter() - t0, 1)}
    del kb, entities
    return {**out, **measure_pipelines(pipeline, dev, work / "kb")}


def measure_pipelines(pipeline: Path, dev: Path, large_kb: Path) -> dict:
    out = {"nprobe": json.loads((large_kb / "meta.json").read_text()).get("nprobe")}
    for label, kb_path in (("2.4M entities, ivfpq", large_kb), ("MeSH only, flat", pipeline / "pel_linker" / "kb")):
        out[label] = measure_load(pipeline, dev, kb_path)
    return out


def run_row(name: str, value: int, found: np.ndarray, seconds: float, gold: list, exact: np.ndarray, report: dict) -> dict:
    r1 = recall(found, gold)
    return {name: value, "R@1": round(r1, 4), "loss_pt": round(100 * (report["exact"]["R@1"] - r1), 2),
            "top1_same_as_exact": round(float(np.mean(found[:, 0] == exact[:, 0])), 4),
            "queries_per_s": round(len(found) / seconds, 1)}


def save(report: dict) -> None:
    (HERE / "large_kb.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    lines = ["# A 2.4M-entity KB: compressed indexes vs exact search", "",
             "Written by `benchmarks/large_kb.py` (its docstring says how the synthetic KB is made). "
             "Recall@1: the trained retriever alone on BC5CDR dev in-KB mentions, over all entities.", "",
             f"Machine: {report['machine']}", "",
             f"Entities: {report['total_entities']:,} (MeSH 354,068 + synthetic); distractors: {report.get('distractors')}", "",
             f"Exact search, MeSH only: {report.get('exact_mesh_only')}; over all: {report.get('exact')}", "",
             "| index | RAM MB | build s | setting | R@1 | loss vs exact (pt) | top-1 same as exact | queries/s |",
             "|---|---|---|---|---|---|---|---|"]
    for row in ([report["refined"]] if "refined" in report else []) + report.get("indexes", []):
        for run in row["runs"]:
            setting = ", ".join(f"{k} {v}" for k, v in run.items() if k in ("nprobe", "efSearch"))
            lines.append(f"| {row['factory']} | {row['ram_mb']} | {row['build_s']} | {setting} | {run['R@1']} | "
                         f"{run['loss_pt']} | {run['top1_same_as_exact']} | {run['queries_per_s']} |")
    if "pipeline" in report:
        p = report["pipeline"]
        lines += ["", "## The whole pipeline over the 2.4M-entity KB", "",
                  "The saved BC5CDR pipeline (trained retriever, abbreviation rule, alias table) with its KB swapped for the "
                  "2.4M-entity one (MeSH records + entities named `synthetic entity N`), in a fresh process: "
                  f"spacy.load, then nlp.pipe over BC5CDR dev gold spans; ivfpq nprobe {p.get('nprobe')}. "
                  "Peak RSS is the process's VmHWM.", "",
                  "| KB | load s | peak RSS MB | R@1 | mentions/s |", "|---|---:|---:|---:|---:|"]
        for label in ("2.4M entities, ivfpq", "MeSH only, flat"):
            r = p[label]
            lines.append(f"| {label} | {r['load_seconds']} | {r['peak_rss_mb']:.0f} | {r['R@1']} | {r['mentions_per_s']} |")
    (HERE / "large_kb.md").write_text("\n".join(lines) + "\n", encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
