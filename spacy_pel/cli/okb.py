"""``python -m spacy_pel okb``: the command line over :mod:`spacy_pel.evaluation.okb`."""
from __future__ import annotations

from pathlib import Path
from typing import List

import typer

from ..evaluation.okb import __doc__ as LIBRARY_DOC
from ..evaluation.okb import make_okb
from ._errors import cli_errors, require_dir, require_file, require_writable_parent
from ._output import echo_json

app = typer.Typer(add_completion=False, help=LIBRARY_DOC)


@app.command()
@cli_errors
def main(
    kb: Path = typer.Option(..., "--kb", help="KB folder (from build_kb)"),
    remove: List[str] = typer.Option(..., "--remove", help="MeSH tree branch to remove, e.g. C10 (repeatable)"),
    corpus: List[Path] = typer.Option(..., "--corpus", help=".spacy corpus to relabel (repeatable)"),
    output: Path = typer.Option(..., "--output", "-o", help="Folder for kb/ and the relabelled corpora"),
):
    """Remove KB entities of the given branches and relabel their mentions NIL."""
    require_dir(kb, "KB folder", "meta.json")
    for path in corpus:
        require_file(path, "corpus")
    require_writable_parent(output, "output")
    echo_json(make_okb(kb, remove, corpus, output))
