"""``python -m spacy_pel train``: the command line over :mod:`spacy_pel.training.retriever`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import typer
from confection import ConfigValidationError
from spacy.cli._util import (
    parse_config_overrides,  # spaCy's own --section.key value parser
)

from ..training.config import ConfigError
from ..training.retriever import __doc__ as LIBRARY_DOC
from ..training.retriever import train

app = typer.Typer(add_completion=False, help=LIBRARY_DOC)
EXIT_BAD_CONFIG = 2


def run_config(train_fn: Callable[..., dict], ctx: typer.Context, config: Path, output: Path) -> dict:
    """``train_fn(config, output, overrides)``; a bad config or override is one ``error:`` line and exit 2."""
    if not config.is_file():
        typer.secho(f"error: config file not found: {config}", err=True, fg="red")
        raise typer.Exit(EXIT_BAD_CONFIG)
    try:
        return train_fn(config, output, parse_config_overrides(ctx.args))
    except (ConfigError, ConfigValidationError) as err:
        message = " ".join(line.strip() for line in str(err).strip().splitlines() if line.strip())
        typer.secho(f"error: {message}", err=True, fg="red")
        raise typer.Exit(EXIT_BAD_CONFIG) from None


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def main(
    ctx: typer.Context,
    config: Path = typer.Argument(..., help="Training config (configs/train_*.cfg)"),
    output: Path = typer.Option(..., "--output", "-o", help="Output folder: best/ (encoder), last/ (checkpoint)"),
):
    """Train the retriever. Override settings as in spaCy: --training.max_steps 100 --paths.train x."""
    state = run_config(train, ctx, config, output)
    typer.echo(json.dumps({k: state[k] for k in ("step", "best", "best_step", "train_seconds")}, indent=2))
