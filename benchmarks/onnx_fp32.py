"""KB encoding in fp32 by torch vs by ONNX Runtime (``precision = "onnx_fp32"``, what ``auto`` encodes a KB
with on a CPU without bf16 units): the same sample of MeSH entities and of their names encoded both ways,
alternating, each round timed; the vectors compared (largest difference, smallest cosine).

    python benchmarks/onnx_fp32.py --encoder ENCODER [--sample 3000] [--rounds 3]

Writes benchmarks/onnx_fp32.md and benchmarks/onnx_fp32.json. Run it alone (~3 min on 2 cores).
"""
from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SHARED, lscpu_model, machine, machine_line  # noqa: E402
from spacy_pel.kb import read_kb  # noqa: E402
from spacy_pel.models.encoder import BiEncoder  # noqa: E402
from spacy_pel.retrieval.names import encode_names  # noqa: E402

HERE = Path(__file__).resolve().parent
PRECISIONS = ("fp32", "onnx_fp32")


def encode(encoder: BiEncoder, kind: str, items: list) -> np.ndarray:
    """Entity rows as ``build-kb`` encodes them, or name rows (``[CLS] name [SEP]``) as ``build-names`` does."""
    return encoder.encode_entities(items, batch_size=128) if kind == "entities" else encode_names(encoder, items)


def main(encoder: str = typer.Option(..., help="Encoder folder or name"),
         kb: Path = typer.Option(SHARED / "mesh", help="MeSH folder"),
         sample: int = 3000, rounds: int = 3, seed: int = 0,
         output: Path = typer.Option(HERE / "onnx_fp32", help="Report path without suffix")) -> None:
    entities = read_kb(kb, "mesh")
    chosen = random.Random(seed).sample(entities, sample)
    inputs = {"entities": chosen, "names": [name for e in chosen for name in dict.fromkeys([e.name, *e.aliases])]}
    encoders = {p: BiEncoder.from_pretrained(encoder, precision=p) for p in PRECISIONS}
    times = {(p, kind): [] for p in PRECISIONS for kind in inputs}
    vectors = {}
    for kind, items in inputs.items():
        for p in PRECISIONS:  # untimed warm-up: the ONNX Runtime copy is made here (~3 s)
            encode(encoders[p], kind, items[:256])
        for _ in range(rounds):
            for p in PRECISIONS:
                start = time.perf_counter()
                vectors[(p, kind)] = encode(encoders[p], kind, items)
                times[(p, kind)].append(time.perf_counter() - start)
    rows = []
    for kind, items in inputs.items():
        a, b = vectors[("fp32", kind)], vectors[("onnx_fp32", kind)]
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        rate = {p: len(items) / statistics.median(times[(p, kind)]) for p in PRECISIONS}
        rows.append({"inputs": kind, "count": len(items), "fp32_per_s": round(rate["fp32"], 1),
                     "onnx_fp32_per_s": round(rate["onnx_fp32"], 1), "speedup": round(rate["onnx_fp32"] / rate["fp32"], 3),
                     "seconds": {p: [round(t, 2) for t in times[(p, kind)]] for p in PRECISIONS},
                     "max_abs_difference": float(np.abs(a - b).max()), "min_cosine": float(cos.min())})
    m = {**machine(), "lscpu_model": lscpu_model()}
    report = {"machine": m, "encoder": encoder, "sample": sample, "rounds": rounds, "seed": seed, "rows": rows}
    output.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf8")
    lines = ["# KB encoding in fp32: torch vs ONNX Runtime (`onnx_fp32`)", "", machine_line(m) + ".", "",
             f"{sample} MeSH entities drawn with seed {seed} (and all their names, each encoded as a name row is), "
             f"encoded by `{encoder}` with `precision` fp32 (torch) and `onnx_fp32` (ONNX Runtime, an unquantised "
             f"copy of the tower), alternating, {rounds} rounds each after an untimed warm-up; rates from the median round.", "",
             "| inputs | count | torch fp32 /s | ONNX Runtime fp32 /s | speed-up | max abs difference | min cosine |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['inputs']} | {r['count']:,} | {r['fp32_per_s']:,.0f} | {r['onnx_fp32_per_s']:,.0f} | "
              f"{r['speedup']:.2f}× | {r['max_abs_difference']:.1e} | {r['min_cosine']:.7f} |" for r in rows]
    lines += ["", f"Reproduce: `python benchmarks/onnx_fp32.py --encoder {encoder} --sample {sample} --rounds {rounds}` (alone)."]
    output.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
