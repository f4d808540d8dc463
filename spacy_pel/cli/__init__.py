"""Thin typer commands over the library: ``python -m spacy_pel <command> --help``.

Each module here parses arguments, calls one library function and prints its result; tests call the
library functions directly. The old entry points (``python -m spacy_pel.build_kb`` …) run the same
commands.
"""
from __future__ import annotations

import typer

from . import (
    adapt,
    aliases,
    build_kb,
    build_names,
    bulk,
    calibrate,
    convert,
    discover,
    evaluate,
    label_types,
    okb,
    retarget,
    silver,
    train,
    train_e2e,
    train_reranker,
    train_spans,
    visualize,
)

COMMANDS = {
    "convert": convert,
    "adapt": adapt,
    "build-kb": build_kb,
    "build-names": build_names,
    "train": train,
    "train-e2e": train_e2e,
    "train-spans": train_spans,
    "train-reranker": train_reranker,
    "aliases": aliases,
    "label-types": label_types,
    "evaluate": evaluate,
    "calibrate": calibrate,
    "okb": okb,
    "silver": silver,
    "retarget": retarget,
    "discover": discover,
    "visualize": visualize,
    "bulk": bulk,
}

app = typer.Typer(add_completion=False, help=__doc__, no_args_is_help=True)
for _name, _module in COMMANDS.items():
    _info = _module.app.registered_commands[0]  # each module's app holds its one command
    app.command(_name, context_settings=_info.context_settings, help=_module.app.info.help)(_info.callback)
