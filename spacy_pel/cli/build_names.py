"""``python -m spacy_pel build-names``: the command line over :mod:`spacy_pel.retrieval.names`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..retrieval.build import CHUNK
from ..retrieval.names import INPUTS, MAX_LENGTH, build_names
from ..retrieval.ray_build import RayBuildError
from ._errors import cli_errors, fail, ray_options, require_writable_parent
from ._output import echo_json

HELP = (
    "Encode every name and synonym of a KB's entities as its own row, for name-level search.\n\n"
    "Reads a KB folder written by build-kb and writes a name index (default: KB/names) for the linker's name_rows rule, where "
    "an entity scores by its best-matching name. Resumable, like build-kb.\n\n"
    "Example: python -m spacy_pel build-names kbs/mesh --output kbs/mesh_names"
)

app = typer.Typer(add_completion=False)


@app.command(help=HELP)
@cli_errors
def main(
    kb: Path = typer.Argument(..., help="KB folder (from build-kb)"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Name index folder to write (default: KB/names)"),
    encoder: Optional[str] = typer.Option(None, "--encoder", help="Encoder (default: the KB's; its entity tower must match)"),
    input: str = typer.Option("name", "--input", help=f"{' or '.join(INPUTS)}: what each name row encodes"),
    max_length: int = typer.Option(MAX_LENGTH, "--max-length", help="Word pieces per name input"),
    batch_size: int = typer.Option(256, "--batch-size"),
    precision: str = typer.Option("auto", "--precision", help="fp32, bf16, int8, int8_rows, int8_dynamic, onnx_fp32 or auto (bf16 where the CPU/GPU has bf16 units; else on a CPU with VNNI int8_rows — torch's int8 products, block-wise int8 where torch lacks them; the pipeline's R@1 unchanged —, onnx_fp32 without; fp32 on a GPU)"),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda"),
    chunk_size: int = typer.Option(CHUNK, "--chunk-size", help="Names per resumable chunk of OUTPUT.partial/"),
    force: bool = typer.Option(False, "--force", help="Replace a name index at --output built for another KB, encoder, input or length"),
    reuse: Optional[Path] = typer.Option(None, "--reuse", help="An earlier name index (e.g. of the KB's last release) built by this entity encoder at this precision: its vectors are taken for the names it holds, only new names are encoded"),
    ray: bool = typer.Option(False, "--ray", help="Encode the chunks on Ray Data (pip install 'spacy_pel\\[ray]'); same output as a local build"),
    address: Optional[str] = typer.Option(None, "--address", help="With --ray: a Ray cluster (auto, ray://HEAD:10001); default: Ray on this machine"),
    workers: Optional[int] = typer.Option(None, "--workers", help="With --ray: encoder actors (default: CPUs / --cpus-per-worker)"),
    cpus_per_worker: int = typer.Option(1, "--cpus-per-worker", help="With --ray: CPUs and torch threads per actor"),
):
    """Encode every name and synonym of a KB folder's entities as its own row (a name-level index)."""
    if chunk_size < 1:  # 0 is no "default": the build would encode nothing
        fail(f"--chunk-size must be at least 1, not {chunk_size}")
    if not (kb / "meta.json").is_file():
        fail(f"{kb} is not a KB folder (no meta.json); build one with build-kb")
    require_writable_parent(output or kb / "names", "output")
    if reuse is not None and not (reuse / "meta.json").is_file():
        fail(f"--reuse {reuse} is not a name index folder (no meta.json)")
    try:
        report = build_names(kb, output, encoder, input, max_length, batch_size, precision, device, chunk_size=chunk_size,
                             force=force, ray=ray_options(ray, address, workers, cpus_per_worker), reuse=reuse)
    except RayBuildError as err:
        fail(str(err))
    echo_json(report)
