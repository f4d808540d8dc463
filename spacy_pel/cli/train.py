"""``python -m spacy_pel train``: the command line over :mod:`spacy_pel.training.retriever`."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple, Type, TypeVar

import typer
from spacy.cli._util import (
    parse_config_overrides,  # spaCy's own --section.key value parser
)

from ..retrieval.build import check_encoder_source
from ..training.config_files import read_config
from ..training.retriever import train
from ..training.run_config import load_config
from ._errors import cli_errors, fail, require_file
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
    """``train_fn(config, output, overrides)``; a missing or bad config, or an ``encoder.base`` that is no
    model (:func:`check_base_encoder`), is an :class:`InputError`, before anything is written."""
    require_file(config, "training config")
    overrides = parse_config_overrides(ctx.args)
    check_base_encoder(config, overrides)
    return train_fn(config, output, overrides)


def check_base_encoder(config: Optional[Path], overrides: Dict[str, Any]) -> None:
    """Refuse the encoder a run starts from — ``encoder.base`` of ``overrides``, else of the config file
    ``config`` (``None``: the built-in defaults, a model name) — when it can only fail to load: a file, or a
    folder holding no model (:func:`~spacy_pel.retrieval.build.check_encoder_source`)."""
    base = overrides.get("encoder.base")
    if base is None and config is not None:
        section = load_config(config, overrides).get("encoder")
        base = section.get("base") if isinstance(section, dict) else None
    if base:
        check_encoder_source(str(base))


def read_typed_config(cls: Type[T], ctx: typer.Context, config: Optional[Path], flags: Dict[str, Any]) -> Tuple[T, Any]:
    """``cls`` read from ``config`` (``None``: its defaults), overridden by the ``flags`` that were given
    (``{"training.lr": 1e-4}``; ``None``: not given) and by ``--section.key value`` arguments; a flag and
    its ``--section.key`` twin given different values, a missing file or a bad config is an :class:`InputError`."""
    if config is not None:
        require_file(config, "training config")
    overrides = {k: str(v) if isinstance(v, Path) else v for k, v in flags.items() if v is not None}
    for key, value in parse_config_overrides(ctx.args).items():
        if key in overrides and overrides[key] != value:  # values as parsed: --lr 0.001 is --training.lr 1e-3
            fail(f"{flag_name(ctx, key)} {overrides[key]} and --{key} {value} set the same thing: give one of them")
        overrides[key] = value
    return read_config(cls, config, overrides)


def flag_name(ctx: typer.Context, key: str) -> str:
    """The command's own flag that stands for the setting ``key`` (``training.max_steps``: ``--max-steps``;
    ``model.mention_max_length``: ``--mention-length``, its words a subset of the key's)."""
    words = key.rsplit(".", 1)[-1].split("_")
    options = [p for p in ctx.command.params if getattr(p, "param_type_name", "") == "option" and p.name and p.opts]
    exact = [p for p in options if p.name.split("_") == words]
    loose = [p for p in options if set(p.name.split("_")) <= set(words) and ctx.params.get(p.name) is not None]
    found = (exact or loose)[:1]
    return max(found[0].opts, key=len) if found else f"the flag for {key}"


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
