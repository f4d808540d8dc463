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
    link,
    okb,
    retarget,
    silver,
    split,
    train,
    train_e2e,
    train_reranker,
    train_spans,
    visualize,
)
from ._errors import run as run  # the entry points' runner

COMMANDS = {
    "convert": convert,
    "split": split,
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
    "link": link,
    "bulk": bulk,
}

HELP = (
    "Link biomedical entity mentions to knowledge-base ids (MeSH, UMLS, MEDIC, an OBO ontology or your own KB) with a "
    "bi-encoder in spaCy pipelines. These commands prepare corpora and KB indexes, train the models, and calibrate, "
    "evaluate and run the pipelines.\n\n"
    "Run python -m spacy_pel COMMAND --help for what a command reads and writes, with an example. In this "
    "repository, spacy project run all runs the whole workflow, from the raw corpus and KB to a packaged pipeline "
    "(project.yml); spacy project run demo builds, links and evaluates a bundled sample in a few minutes."
)


def summary(help_text: str) -> str:
    """The first sentence of a command's help (its first paragraph up to the first full stop followed by a
    space): what the command list shows beside the command's name."""
    first = help_text.split("\n\n", 1)[0].strip()
    end = first.find(". ")
    return first if end < 0 else first[: end + 1]


app = typer.Typer(add_completion=False, help=HELP, no_args_is_help=True)
for _name, _module in COMMANDS.items():
    _info = _module.app.registered_commands[0]  # each module's app holds its one command
    app.command(_name, context_settings=_info.context_settings, help=_info.help, short_help=summary(_info.help))(_info.callback)
