"""``python -m spacy_pel adapt``: the command line over :mod:`spacy_pel.training.adapt`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from spacy.cli._util import parse_config_overrides  # spaCy's own --section.key value parser

from ..kb import READERS
from ..training.adapt import adapt, check_output
from ..training.self_alignment import adapt_retriever
from ._errors import cli_errors, fail, require_file, require_writable_parent
from ._output import echo_json
from .train import check_base_encoder

HELP = (
    "Teach an encoder a KB's own synonyms, with no annotated text needed.\n\n"
    "Reads a KB file or folder (jsonl, mesh, medic, obo, umls, csv or tsv) and writes an encoder folder to use with build-kb, train or a "
    "pipeline (OUTPUT: a new or empty folder, or an encoder folder to replace); an interrupted run resumes from OUTPUT.work/. --objective names trains on name pairs instead, and any config "
    "setting can be overridden as --section.key value.\n\n"
    "Example: python -m spacy_pel adapt assets/mesh --format mesh -o training/adapted --max-minutes 20"
)

app = typer.Typer(add_completion=False)
OBJECTIVES = ("retriever", "names")


@app.command(help=HELP, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@cli_errors
def main(
    ctx: typer.Context,
    kb: Path = typer.Argument(..., help="KB file or folder (as build-kb reads it)"),
    output: Path = typer.Option(..., "--output", "-o", help="Encoder folder to write (its resumable state: OUTPUT.work/)"),
    format: str = typer.Option("jsonl", "--format", help=f"KB format: {', '.join(READERS)}"),
    objective: str = typer.Option("retriever", "--objective", help="retriever: a synonym as a marked mention vs its "
                                  "entity's KB row, both towers (configs/adapt.cfg); names: name-to-name pairs, "
                                  "one tower (configs/adapt_names.cfg)"),
    config: Optional[Path] = typer.Option(None, "--config", help="Settings file (configs/adapt.cfg or configs/adapt_names.cfg "
                                          "by objective; default: the same values built in)"),
    encoder: Optional[str] = typer.Option(None, "--encoder", help="Encoder to start from (default: the config's)"),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Step budget (0 and no mention stage: nothing "
                                            "to train, the start encoder is written as it is)"),
    max_minutes: Optional[float] = typer.Option(None, "--max-minutes", help="Time budget in minutes (0 = none)"),
    device: Optional[str] = typer.Option(None, "--device", help="auto, cpu or cuda"),
):
    """Teach an encoder the KB's own synonyms (no annotated text needed). Any setting of the config
    can be overridden as in spaCy: --loss.name info_nce --training.batch_pairs 128."""
    if format not in READERS:
        fail(f"unknown KB format {format!r}; known: {', '.join(READERS)}")
    if not kb.exists():
        fail(f"KB not found: {kb}")
    if config is not None:
        require_file(config, "adapt config")
    if objective not in OBJECTIVES:
        fail(f"unknown objective {objective!r}; known: {', '.join(OBJECTIVES)}")
    require_writable_parent(output, "output")
    check_output(output)  # a file or a folder of other files would be replaced: refused before any work
    names = objective == "names"
    overrides = {"kb.path" if names else "paths.kb": str(kb), "kb.format" if names else "paths.kb_format": format,
                 **parse_config_overrides(ctx.args)}
    steps = "training.max_steps" if names else "synonyms.steps"
    for key, value, option in (("encoder.base", encoder, "--encoder"), (steps, max_steps, "--max-steps"),
                               ("training.max_minutes", max_minutes, "--max-minutes"), ("training.device", device, "--device")):
        if value is None:
            continue
        if key in overrides and overrides[key] != value:  # values as parsed: --training.max_minutes 10 is --max-minutes 10.0
            fail(f"{option} {value} and --{key} {overrides[key]} set the same thing: give one of them")
        overrides[key] = value
    check_base_encoder(config, overrides)  # an encoder folder holding no model: refused before OUTPUT.work is made
    state = (adapt if names else adapt_retriever)(config, output, overrides)
    keys = ("step", "best", "best_step", "selected", "train_seconds", "names", "entities", "train_pairs_entities", "unchanged")
    echo_json({k: state[k] for k in keys if k in state})
