"""``python -m spacy_pel bulk``: the command line over :mod:`spacy_pel.bulk.run`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..bulk.run import link_corpus
from ._errors import PIPELINE_HELP, cli_errors, fail, pipeline_folder, require_dir, require_writable_parent
from ._output import echo_json, echo_not_linked

HELP = (
    "Link a large corpus on a Ray Data actor pool and write the mentions as Parquet files.\n\n"
    "Reads a shard or a folder of shards (.jsonl / .ndjson or .parquet with id and text, or PubTator .txt / .pubtator; "
    "a PubTator file without any annotation is raw text; BioC .json / .xml are no shards: link reads them) and a saved "
    "pipeline, and writes mentions/*.parquet per shard, errors/ and summary.json into OUTPUT; a re-run skips finished "
    "shards (with another pipeline it is refused, and so is an OUTPUT with shards no longer in INPUT, unless "
    "--set-aside-stale). Needs Ray Data and pyarrow installed.\n\n"
    "Example: python -m spacy_pel bulk corpus/ linked/ --pipeline training/pipeline --workers 2 --batch-size 64"
)

app = typer.Typer(add_completion=False)


@app.command(help=HELP)
@cli_errors
def main(
    input: Path = typer.Argument(..., help="A shard or a folder of shards: .jsonl / .ndjson / .parquet {id, text}, or PubTator .txt / .pubtator"),
    output: Path = typer.Argument(..., help="Output folder (mentions/*.parquet, errors/, done/, summary.json)"),
    pipeline: Path = typer.Option(..., "--pipeline", callback=pipeline_folder, help=PIPELINE_HELP + " (a folder on shared storage for a cluster)"),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster: auto, or ray://HOST:10001 (default: Ray on this machine)"),
    workers: Optional[int] = typer.Option(None, "--workers", help="Actors, each with its own pipeline copy (default: CPUs / --cpus-per-worker)"),
    batch_size: int = typer.Option(64, "--batch-size", help="Documents per Ray batch (one actor call)"),
    cpus_per_worker: int = typer.Option(1, "--cpus-per-worker", help="CPUs (and torch threads) of each actor"),
    num_cpus: Optional[int] = typer.Option(None, "--num-cpus", help="CPUs of a local Ray (default: all)"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Ray Data's progress bars"),
    set_aside_stale: bool = typer.Option(
        False, "--set-aside-stale", help="Move the files of shards no longer in INPUT (removed or renamed) to "
        "OUTPUT/stale/DATE-TIME/ and go on (default: refuse while OUTPUT holds any)"),
):
    """Link every document of INPUT with the pipeline on a Ray actor pool and write Parquet mention rows
    per input shard into OUTPUT. A re-run skips finished shards; documents that fail are listed in
    OUTPUT/errors/. Prints the summary JSON: documents, mentions, NIL, errors, given mentions not linked, mentions/s."""
    try:
        import ray  # noqa: F401
    except ImportError:
        fail('bulk needs Ray: pip install "spacy_pel[ray]" (or "ray[data]" pyarrow)')
    if not input.exists():
        fail(f"input not found: {input}")
    require_dir(pipeline, "pipeline", "config.cfg")
    require_writable_parent(output, "output")
    if output.exists() and not output.is_dir():
        fail(f"output {output} is a file, not a folder")
    summary = link_corpus(input, output, pipeline, address=address, workers=workers, batch_size=batch_size,
                          cpus_per_worker=cpus_per_worker, num_cpus=num_cpus, progress=progress,
                          set_aside_stale=set_aside_stale)
    echo_json(summary)
    echo_not_linked(summary)
