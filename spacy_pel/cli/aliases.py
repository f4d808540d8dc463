"""``python -m spacy_pel aliases``: the command line over :mod:`spacy_pel.pipeline.aliases`."""
from __future__ import annotations

from pathlib import Path
from typing import List

import spacy
import typer

from ..corpora import gold_spans, read_docbin
from ..pipeline.aliases import mention_counts, write_aliases
from ._errors import cli_errors, fail, require_file, require_not_input, require_writable_parent
from ._output import echo_color

HELP = (
    "Count each gold mention's surface form per entity id, for the linker's alias table.\n\n"
    "Reads one or more annotated .spacy corpora and writes a JSON table, given to spacy assemble as --paths.aliases: a mention "
    "whose text was seen in annotated text is linked to that text's most frequent entity.\n\n"
    "Example: python -m spacy_pel aliases corpus/bc5cdr_train.spacy --output training/aliases.json"
)

app = typer.Typer(add_completion=False)


@app.command(help=HELP)
@cli_errors
def main(
    corpora: List[Path] = typer.Argument(..., help="Annotated .spacy corpora (e.g. corpus/bc5cdr_train.spacy)"),
    output: Path = typer.Option(..., "--output", "-o", help="aliases JSON to write"),
):
    """Count each gold mention's surface form per entity id; the pel_linker's `aliases` setting reads it."""
    for corpus in corpora:
        require_file(corpus, "corpus")
    if output.is_dir():
        fail(f"output {output} is a folder; give a .json file name")
    require_not_input(output, corpora)
    require_writable_parent(output, "output")
    nlp = spacy.blank("en")
    docs = [d for c in corpora for d in read_docbin(nlp, c)]
    counts = mention_counts(docs)
    if not counts:
        mentions = sum(len(gold_spans(doc)) for doc in docs)
        why = f"its {mentions} gold mentions are all NIL or have no text" if mentions else "no gold mentions"
        typer.secho(f"warning: {', '.join(map(str, corpora))} ({len(docs)} docs): {why}, so the alias table is empty "
                    "(the alias table rule then matches KB names only)", fg="yellow", err=True, color=echo_color())
    write_aliases(counts, output)
    typer.echo(f"{len(counts)} surface forms from {len(docs)} docs → {output}")
