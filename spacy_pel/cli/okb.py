"""``python -m spacy_pel okb``: the command line over :mod:`spacy_pel.evaluation.okb`."""
from __future__ import annotations

from pathlib import Path
from typing import List

import typer

from ..evaluation.okb import make_okb
from ._errors import cli_errors, require_dir, require_file, require_writable_parent
from ._output import echo_json

HELP = (
    "Make an out-of-KB test set: remove KB branches and relabel their mentions NIL.\n\n"
    "Reads a KB folder and .spacy corpora, removes the entities of the given MeSH tree branches (nothing is re-encoded), and "
    "writes the reduced KB to OUTPUT/kb with the relabelled corpora beside it, to test how a pipeline handles entities its KB "
    "lacks. A branch is a whole tree number: C10 removes C10 and C10.*, not C100; a lone letter (C) is a MeSH category, "
    "and a KB type (Disease) removes that type. The output folder is written as a whole once everything is read; it must "
    "not hold an input.\n\n"
    "Example: python -m spacy_pel okb --kb kbs/mesh --remove C10 --corpus corpus/bc5cdr_dev.spacy -o corpus/okb_c10"
)

app = typer.Typer(add_completion=False)


@app.command(help=HELP)
@cli_errors
def main(
    kb: Path = typer.Option(..., "--kb", help="KB folder (from build_kb)"),
    remove: List[str] = typer.Option(
        ..., "--remove", help="MeSH tree branch to remove, e.g. C10 (C10 and C10.*, not C100), or a KB type (repeatable)"
    ),
    corpus: List[Path] = typer.Option(..., "--corpus", help=".spacy corpus to relabel (repeatable)"),
    output: Path = typer.Option(..., "--output", "-o", help="Folder for kb/ and the relabelled corpora"),
):
    """Remove KB entities of the given branches and relabel their mentions NIL."""
    require_dir(kb, "KB folder", "meta.json")
    for path in corpus:
        require_file(path, "corpus")
    require_writable_parent(output, "output")
    echo_json(make_okb(kb, remove, corpus, output))
