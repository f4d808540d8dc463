"""``python -m spacy_pel build-kb``: the command line over :mod:`spacy_pel.retrieval.build`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..kb import READERS
from ..models.encoder import DEFAULT_ENCODER
from ..retrieval.build import CHUNK, build_kb
from ..retrieval.index import INDEX_KINDS
from ..retrieval.ray_build import RayBuildError
from ._errors import cli_errors, fail, ray_options
from ._output import echo_json, echo_skipped

HELP = (
    "Encode every entity of a KB file into an entity index folder that the linker searches.\n\n"
    "Reads a KB in jsonl, mesh, medic, obo, umls, csv or tsv format and writes a KB folder of entity vectors; an interrupted build resumes "
    "where it stopped. --add appends new entities without retraining, and --ray encodes on Ray Data workers.\n\n"
    "Example: python -m spacy_pel build-kb --kb assets/mesh --format mesh --output kbs/mesh"
)

app = typer.Typer(add_completion=False)


@app.command(help=HELP)
@cli_errors
def main(
    kb: Path = typer.Option(None, "--kb", help="KB file (for --format mesh: the folder with both MeSH TSVs; umls: the META folder or its MRCONSO.RRF)"),
    output: Path = typer.Option(..., "--output", "-o", help="KB folder to write (or extend, with --add)"),
    format: str = typer.Option("jsonl", "--format", "-f", help=f"KB format: {', '.join(READERS)}"),
    encoder: Optional[str] = typer.Option(None, "--encoder", help=f"Encoder folder or Hugging Face name/path (default: with --add or --reuse, the encoder that built that KB, its meta.json; else {DEFAULT_ENCODER})"),
    index: str = typer.Option("flat", "--index", help=f"{', '.join(INDEX_KINDS)}: flat = exact (torch, bf16 where the CPU has it; up to ~1M entities), "
                                                            "hnsw = FAISS graph over float32 vectors, ivfpq = compressed codes in memory "
                                                            "+ exact rescoring from disk (millions of entities in ~d/4 bytes each)"),
    add: Optional[Path] = typer.Option(None, "--add", help="Append this KB file's entities to the KB at --output"),
    batch_size: int = typer.Option(128, "--batch-size"),
    precision: str = typer.Option("auto", "--precision", help="fp32, bf16, int8 (CPU: ONNX Runtime, block-wise int8), int8_dynamic (faster; results depend slightly on batching), onnx_fp32 (CPU: fp32 by ONNX Runtime, ~1.15x torch fp32), or auto: bf16 where the CPU/GPU has bf16 units (about 3x faster there), else onnx_fp32 on a CPU, fp32 on a GPU (never int8: int8 entity vectors cost 0.5 pt of retriever R@1)"),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda"),
    skip_bad_lines: bool = typer.Option(
        False, "--skip-bad-lines", help="Leave out malformed KB lines (counted and listed) instead of stopping at the first"
    ),
    chunk_size: int = typer.Option(CHUNK, "--chunk-size", help="Entities per resumable chunk of OUTPUT.partial/"),
    force: bool = typer.Option(False, "--force", help="Replace a KB at --output that was built from another KB file, format or encoder"),
    reuse: Optional[Path] = typer.Option(None, "--reuse", help="An earlier KB folder: copied when built from this same KB file and entity encoder (e.g. the KB before a training run that froze the entity tower); when built by this entity encoder at this precision from another release of the KB, its vectors are taken for the entities whose text is unchanged and only the others are encoded; otherwise the KB is encoded as usual, with a warning. Without --encoder, encoded by the encoder that built it"),
    ray: bool = typer.Option(False, "--ray", help="Encode the chunks on Ray Data (pip install 'spacy_pel\\[ray]'); same output as a local build"),
    address: Optional[str] = typer.Option(None, "--address", help="With --ray: a Ray cluster (auto, ray://HEAD:10001); default: Ray on this machine"),
    workers: Optional[int] = typer.Option(None, "--workers", help="With --ray: encoder actors (default: CPUs / --cpus-per-worker)"),
    cpus_per_worker: int = typer.Option(1, "--cpus-per-worker", help="With --ray: CPUs and torch threads per actor"),
):
    """Encode every entity of a KB file and write an entity index folder."""
    if chunk_size < 1:  # 0 is no "default": the build would encode nothing
        fail(f"--chunk-size must be at least 1, not {chunk_size}")
    if reuse is not None and not (reuse / "meta.json").is_file():
        fail(f"--reuse {reuse} is not a KB folder (no meta.json)")
    try:
        report = build_kb(
            kb, output, format, encoder, index, add, batch_size, precision, device,
            skip_bad_lines=skip_bad_lines, chunk_size=chunk_size, force=force,
            ray=ray_options(ray, address, workers, cpus_per_worker), reuse=reuse,
        )
    except RayBuildError as err:
        fail(str(err))
    echo_skipped(report)
    echo_json(report)
