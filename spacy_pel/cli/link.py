"""``python -m spacy_pel link``: the command line over :func:`spacy_pel.bulk.local.link_file`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..bulk.linked_formats import OUTPUT_FORMATS
from ..bulk.local import INPUT_FORMATS, link_file
from ..files import is_stream, json_text
from ._errors import (
    PIPELINE_HELP,
    cli_errors,
    fail,
    pipeline_folder,
    require_dir,
    require_file,
    require_not_input,
    require_writable_parent,
    run,
)
from ._output import echo_json, echo_not_linked, echo_skipped

HELP = (
    "Link the mentions of one corpus file and write them as JSON lines, PubTator or BioC.\n\n"
    "Reads PubTator, BioC XML/JSON, .spacy or Prodigy tasks (--format prodigy) (every mention given is linked, "
    "overlapping ones too) or JSON lines / Parquet of id and text (the "
    "pipeline's NER or span finder finds the mentions), links them in this process with a saved pipeline, and writes "
    "OUTPUT in the format of its extension: .jsonl (every candidate and score), .pubtator or .txt (NIL as -1, what "
    "BC5CDR's evaluation reads), .xml or .json (BioC). For a large corpus on many machines, use bulk.\n\n"
    "Example: python -m spacy_pel link assets/bc5cdr/CDR_DevelopmentSet.PubTator.txt linked/dev.pubtator --pipeline "
    "training/pipeline_calibrated"
)

app = typer.Typer(add_completion=False)


@app.command(help=HELP)
@cli_errors
def main(
    input: Path = typer.Argument(..., help="Corpus file: PubTator, BioC (.xml, .json), .spacy, JSON lines (.jsonl) or Parquet of {id, text}; "
                               "Prodigy tasks with --format prodigy"),
    output: Path = typer.Argument(..., help="Output file: .jsonl, .pubtator / .txt, .xml (BioC) or .json (BioC); Prodigy review tasks "
                                                "with --output-format prodigy"),
    pipeline: Path = typer.Option(..., "--pipeline", callback=pipeline_folder, help=PIPELINE_HELP),
    format: Optional[str] = typer.Option(None, "--format", help=f"Input format ({'|'.join(INPUT_FORMATS)}); default: by extension"),
    output_format: Optional[str] = typer.Option(None, "--output-format", help=f"Output format ({'|'.join(OUTPUT_FORMATS)}); "
                                                "default: by extension"),
    batch_size: int = typer.Option(1000, "--batch-size", help="Documents linked per call of the pipeline (fewer: a finer progress "
                                    "bar, but slower: the linker batches the open mentions of a call)"),
    skip_bad_lines: bool = typer.Option(False, "--skip-bad-lines", help="Leave out malformed documents (counted and "
                                        "listed) instead of stopping at the first"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="A progress bar with documents and mentions/s"),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="The pipeline's nlp.max_length for this run: "
                                             "a raw text longer than it (spaCy's default: 1000000 characters) is refused "
                                             "before linking; its NER and parser need about 1 GB of memory per 100000"),
):
    """Link the documents of INPUT and write OUTPUT; prints the counts as JSON (on stderr when OUTPUT is a stream)."""
    require_file(input, "input")
    require_dir(pipeline, "pipeline", "config.cfg")
    require_writable_parent(output, "output")
    if output.is_dir():
        fail(f"output {output} is a folder; give a file name")
    require_not_input(output, [input])
    if batch_size < 1:
        fail("--batch-size must be at least 1")
    if max_length is not None and max_length < 1:
        fail("--max-length must be at least 1")
    stats = link_file(input, output, pipeline, format=format, output_format_name=output_format, batch_size=batch_size,
                      skip_bad_lines=skip_bad_lines, progress=progress, max_length=max_length)
    if is_stream(output):  # OUTPUT is stdout (/dev/stdout, a pipe): the linked documents alone there, the counts on stderr
        typer.echo(json_text(stats, indent=2), err=True)
    else:
        echo_json(stats)
    echo_skipped(stats)
    if stats["left_out_by_answer"]:
        answers = ", ".join(f"{n} {answer}" for answer, n in sorted(stats["left_out_by_answer"].items()))
        typer.echo(f"left out Prodigy tasks that were not accepted: {answers}", err=True)
    echo_not_linked(stats)


if __name__ == "__main__":
    run(app)
