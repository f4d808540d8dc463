"""``python -m spacy_pel train-spans``: the command line over :mod:`spacy_pel.training.span_scorer`."""
from __future__ import annotations

import json
from pathlib import Path

import spacy
import typer

from ..corpora import read_docbin
from ..models.doc_encoder import MAX_SPAN_LEN
from ..retrieval.build import load_encoder
from ..training.span_scorer import __doc__ as LIBRARY_DOC
from ..training.span_scorer import train_span_scorer
from ._errors import cli_errors

app = typer.Typer(add_completion=False, help=LIBRARY_DOC)


@app.command()
@cli_errors
def main(
    encoder: str = typer.Option(..., "--encoder", help="Encoder folder or name (its mention transformer is used)"),
    train: Path = typer.Option(..., "--train", help="Training .spacy corpus with gold spans"),
    dev: Path = typer.Option(..., "--dev", help="Dev .spacy corpus (for the threshold γ)"),
    output: Path = typer.Option(..., "--output", "-o", help="Folder for span_scorer.safetensors + report"),
    max_len: int = typer.Option(MAX_SPAN_LEN, "--max-len", help="Longest span, in tokens (L)"),
    epochs: int = typer.Option(8, "--epochs"),
    lr: float = typer.Option(3e-3, "--lr", help="Adam learning rate (constant)"),
    seed: int = typer.Option(0, "--seed"),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUTPUT/last instead of starting over"),
):
    """Train the span scorer on frozen token vectors and choose γ on dev."""
    nlp = spacy.blank("en")
    enc = load_encoder(encoder, precision="fp32")  # a missing encoder: one line, before any work
    report = train_span_scorer(enc, read_docbin(nlp, train), read_docbin(nlp, dev), output, max_len, epochs, lr, seed,
                               resume=resume)
    typer.echo(json.dumps(report, indent=2))
