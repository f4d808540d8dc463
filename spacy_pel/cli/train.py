"""``python -m spacy_pel train``: the command line over :mod:`spacy_pel.training.retriever`."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple, Type, TypeVar

import typer
from spacy.cli._util import (
    parse_config_overrides,  # spaCy's own --section.key value parser
)

from ..training.config_files import read_config
from ..training.retriever import train
from ._errors import cli_errors, require_file
from ._output import echo_json

HELP = (
    "Train the retriever, the bi-encoder that links mentions, on an annotated corpus.\n\n"
    "Reads a training config (configs/train_*.cfg) that names the .spacy corpora and the KB folder, and writes the best encoder "
    "to OUTPUT/best and a resumable checkpoint to OUTPUT/last. Any config setting can be overridden as --section.key value.\n\n"
    "Example: python -m spacy_pel train configs/train_pb_random.cfg --output training/retriever --training.max_steps 200"
)

app = typer.Typer(add_completion=False)
T = TypeVar("T")


def run_config(train_fn: Callable[..., dict], ctx: typer.Context, config: Path, output: Path) -> dict:
    """``train_fn(config, output, overrides)``; a missing or bad config is an :class:`InputError`."""
    require_file(config, "training config")
    return train_fn(config, output, parse_config_overrides(ctx.args))


def read_typed_config(cls: Type[T], ctx: typer.Context, config: Optional[Path], flags: Dict[str, Any]) -> Tuple[T, Any]:
    """``cls`` read from ``config`` (``None``: its defaults), overridden by the ``flags`` that were given
    (``{"training.lr": 1e-4}``; ``None``: not given) and then by ``--section.key value`` arguments; a
    missing file or a bad config is an :class:`InputError`."""
    if config is not None:
        require_file(config, "training config")
    overrides = {k: str(v) if isinstance(v, Path) else v for k, v in flags.items() if v is not None}
    overrides.update(parse_config_overrides(ctx.args))
    return read_config(cls, config, overrides)


@app.command(help=HELP, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@cli_errors
def main(
    ctx: typer.Context,
    config: Path = typer.Argument(..., help="Training config (configs/train_*.cfg)"),
    output: Path = typer.Option(..., "--output", "-o", help="Output folder: best/ (encoder), last/ (checkpoint)"),
):
    """Train the retriever. Override settings as in spaCy: --training.max_steps 100 --paths.train x."""
    state = run_config(train, ctx, config, output)
    echo_json({k: state[k] for k in ("step", "best", "best_step", "train_seconds")})
