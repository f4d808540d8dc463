"""``python -m spacy_pel train``: the command line over :mod:`spacy_pel.training.retriever`."""
from __future__ import annotations

import json
from pathlib import Path

import typer
from spacy.cli._util import (
    parse_config_overrides,  # spaCy's own --section.key value parser
)

from ..training.retriever import __doc__ as LIBRARY_DOC
from ..training.retriever import train

app = typer.Typer(add_completion=False, help=LIBRARY_DOC)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def main(
    ctx: typer.Context,
    config: Path = typer.Argument(..., help="Training config (configs/train_*.cfg)"),
    output: Path = typer.Option(..., "--output", "-o", help="Output folder: best/ (encoder), last/ (checkpoint)"),
):
    """Train the retriever. Override settings as in spaCy: --training.max_steps 100 --paths.train x."""
    overrides = parse_config_overrides(ctx.args)
    state = train(config, output, overrides)
    typer.echo(json.dumps({k: state[k] for k in ("step", "best", "best_step", "train_seconds")}, indent=2))
