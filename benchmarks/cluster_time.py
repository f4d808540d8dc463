"""Time clustering inference over all BC5CDR dev mentions (issue 5), beyond encoding.

    python benchmarks/cluster_time.py [--vectors training/bench/ce_mixed50_dev_vecs.npy] [--threads 1]

Uses the dev mention vectors cached by benchmarks/discovery.py; times `cluster()` (k = 10, including
the nearest-entity search over all MeSH records) for β = 0 and β = 0.3. Writes benchmarks/cluster_time.md.
"""
import time
from pathlib import Path

import faiss
import numpy as np
import torch
import typer

from spacy_pel.discovery.cluster import cluster
from spacy_pel.retrieval.index import EntityIndex

HERE = Path(__file__).resolve().parent


def main(kb: Path = typer.Option(Path("kbs/mesh")),
         vectors: Path = typer.Option(Path("training/bench/ce_mixed50_dev_vecs.npy")),
         threads: int = typer.Option(1, help="CPU threads for FAISS and torch")):
    faiss.omp_set_num_threads(threads)
    torch.set_num_threads(threads)
    index = EntityIndex.from_disk(kb)
    vecs = np.load(vectors)
    rows = []
    for beta in (0.0, 0.3):
        t0 = time.perf_counter()
        cluster(vecs, index, k=10, mention_margin=beta)
        rows.append(f"| {beta} | {len(vecs)} | {len(index)} | {time.perf_counter() - t0:.1f} s |")
    md = ["# Clustering inference time over all BC5CDR dev mentions", "",
          f"Reproduce: `python benchmarks/cluster_time.py --vectors {vectors} --threads {threads}`; {threads} CPU thread(s), "
          "k = 10 mention neighbours, time includes each mention's nearest-entity search over the KB; encoding not included.", "",
          "| β | mentions | KB entities | clustering time |", "|---:|---:|---:|---:|", *rows, ""]
    (HERE / "cluster_time.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    typer.run(main)
