"""``python -m spacy_pel convert``: PubTator corpus → spaCy DocBin with linked gold entities."""
from __future__ import annotations

import json
from pathlib import Path

import typer

from ..corpora import convert

app = typer.Typer(add_completion=False, help=__doc__)


@app.command()
def main(
    input: Path = typer.Argument(..., help="PubTator file (BC5CDR, NCBI disease, MedMentions)"),
    output: Path = typer.Argument(..., help="Output .spacy file"),
    lang: str = typer.Option("en", "--lang", help="Language of the blank tokenizer"),
):
    """Convert a PubTator corpus; prints counts of mentions, NIL, composite, overlapping and unaligned."""
    stats = convert(input, output, lang)
    typer.echo(json.dumps(stats, indent=2))
    if stats["unaligned"]:
        typer.secho(f"{stats['unaligned']} mention(s) could not be aligned to tokens (listed above)", fg="yellow")


if __name__ == "__main__":
    app()
