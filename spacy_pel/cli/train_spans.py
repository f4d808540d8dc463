"""``python -m spacy_pel train-spans``: the command line over :mod:`spacy_pel.training.span_scorer`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..retrieval.build import load_encoder
from ..training.config_files import SpanScorerFile, train_spans_from_config
from ._errors import cli_errors
from ._output import echo_json
from .train import read_typed_config

HELP = (
    "Train a span scorer that finds mentions, on frozen token vectors of an encoder.\n\n"
    "Reads an encoder and training and dev .spacy corpora with gold spans, and writes OUTPUT/span_scorer.safetensors with a "
    "report giving the span threshold chosen on dev. Only the scorer learns, so it is quick on a CPU; settings come from "
    "--config or its defaults, and each flag overrides one.\n\n"
    "Example: python -m spacy_pel train-spans --config configs/train_spans.cfg -o training/spans --encoder "
    "training/retriever/best --train corpus/train.spacy --dev corpus/dev.spacy --epochs 4"
)

app = typer.Typer(add_completion=False)
D = SpanScorerFile()


@app.command(help=HELP, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@cli_errors
def main(
    ctx: typer.Context,
    output: Path = typer.Option(..., "--output", "-o", help="Folder for span_scorer.safetensors + report"),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Typed config (configs/train_spans.cfg); without it, its defaults"),
    encoder: Optional[str] = typer.Option(None, "--encoder", help="\\[paths] encoder: encoder folder or name (its mention transformer is used)"),
    train: Optional[Path] = typer.Option(None, "--train", help="\\[paths] train: training .spacy corpus with gold spans"),
    dev: Optional[Path] = typer.Option(None, "--dev", help="\\[paths] dev: dev .spacy corpus (for the threshold γ)"),
    max_len: Optional[int] = typer.Option(None, "--max-len", help=f"Longest span, in tokens (L) [{D.spans.max_len}]"),
    epochs: Optional[int] = typer.Option(None, "--epochs", help=f"[{D.training.epochs}]"),
    lr: Optional[float] = typer.Option(None, "--lr", help=f"Adam learning rate (constant) [{D.training.lr}]"),
    seed: Optional[int] = typer.Option(None, "--seed", help=f"[{D.training.seed}]"),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUTPUT/last instead of starting over"),
):
    """Train the span scorer on frozen token vectors and choose γ on dev. Settings come from --config
    (or its defaults); each flag, and --section.key value, overrides one."""
    flags = {"paths.encoder": encoder, "paths.train": train, "paths.dev": dev, "spans.max_len": max_len,
             "training.epochs": epochs, "training.lr": lr, "training.seed": seed}
    cfg, raw = read_typed_config(SpanScorerFile, ctx, config, flags)
    enc = load_encoder(cfg.paths.encoder, precision="fp32")  # a missing encoder: one line, before any work
    report = train_spans_from_config(cfg, raw, output, resume=resume, encoder=enc)
    echo_json(report)
