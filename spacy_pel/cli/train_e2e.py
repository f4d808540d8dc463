"""``python -m spacy_pel train-e2e``: the command line over :mod:`spacy_pel.training.joint`."""
from __future__ import annotations

from pathlib import Path

import typer

from ..training.joint import train_e2e_seeds
from ._errors import cli_errors
from ._output import echo_json
from .train import run_config

HELP = (
    "Train the span model that lets a pipeline find its own mentions in raw text.\n\n"
    "Reads a training config (configs/train_e2e.cfg) and trains the mention encoder, span scorer and label head together with "
    "the linking loss; writes OUTPUT/best, a resumable OUTPUT/last and span_models.json. --seeds N trains N span models that "
    "the span finder averages; settings can be overridden as --section.key value.\n\n"
    "Example: python -m spacy_pel train-e2e configs/train_e2e.cfg --output training/e2e --seeds 2"
)

app = typer.Typer(add_completion=False)


@app.command(help=HELP, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@cli_errors
def main(
    ctx: typer.Context,
    config: Path = typer.Argument(..., help="Training config (configs/train_e2e.cfg)"),
    output: Path = typer.Option(..., "--output", "-o", help="Output folder: best/ (encoder + span scorer), last/, span_models.json"),
    seeds: int = typer.Option(1, "--seeds", min=1, help="Span models to train (seed + k for the k-th, in OUTPUT/seeds/<k>); "
                              "the span finder with model = OUTPUT averages them (one transformer pass each)"),
):
    """Jointly train the mention transformer, span scorer and linking. Overrides: --training.max_steps 50."""
    states = run_config(lambda c, o, v: train_e2e_seeds(c, o, seeds, v), ctx, config, output)
    keys = ("step", "best", "best_step", "train_seconds", "span_report")
    summaries = [{k: state[k] for k in keys} for state in states]
    echo_json(summaries[0] if seeds == 1 else summaries)
