"""``python -m spacy_pel train-reranker``: the command line over :mod:`spacy_pel.training.reranker`."""
from __future__ import annotations

import json
from pathlib import Path

import typer

from ..retrieval.build import load_encoder
from ..training.reranker import RerankerConfig, train_reranker
from ..training.reranker import __doc__ as LIBRARY_DOC
from ._errors import cli_errors, require_file

app = typer.Typer(add_completion=False, help=LIBRARY_DOC)
DEFAULTS = RerankerConfig()


@app.command()
@cli_errors
def main(
    encoder: str = typer.Option(..., "--encoder", help="The retriever (bi-encoder folder) whose candidates are re-ranked"),
    kb: Path = typer.Option(..., "--kb", help="KB folder built with that encoder"),
    train: Path = typer.Option(..., "--train", help="Training .spacy corpus with gold mentions and ids"),
    output: Path = typer.Option(..., "--output", "-o", help="Folder: best/ (the cross-encoder), last/, candidates, report"),
    base: str = typer.Option(DEFAULTS.base, "--base", help="Model to start from (Hugging Face name/folder or a cross-encoder)"),
    candidates: int = typer.Option(DEFAULTS.candidates, "--candidates", help="Retriever candidates per mention"),
    mention_length: int = typer.Option(DEFAULTS.mention_max_length, "--mention-length", help="Word pieces of the mention side"),
    entity_length: int = typer.Option(DEFAULTS.entity_max_length, "--entity-length", help="Word pieces of the entity side"),
    batch_mentions: int = typer.Option(DEFAULTS.batch_mentions, "--batch-mentions", help="Mentions per step"),
    max_steps: int = typer.Option(DEFAULTS.max_steps, "--max-steps"),
    lr: float = typer.Option(DEFAULTS.lr, "--lr"),
    eval_every: int = typer.Option(DEFAULTS.eval_every, "--eval-every", help="Held-out evaluation every N steps"),
    held_out_docs: int = typer.Option(DEFAULTS.held_out_docs, "--held-out-docs", help="Last N training docs kept out"),
    seed: int = typer.Option(DEFAULTS.seed, "--seed"),
    restart: bool = typer.Option(False, "--restart", help="Start over instead of resuming from OUTPUT/last"),
):
    """Train the cross-encoder re-ranker on the retriever's own top candidates (resumes by default)."""
    require_file(train, "training corpus")
    load_encoder(encoder, precision="fp32")  # a missing encoder: one line, before any output folder is made
    cfg = RerankerConfig(base=base, candidates=candidates, mention_max_length=mention_length,
                         entity_max_length=entity_length, batch_mentions=batch_mentions, max_steps=max_steps, lr=lr,
                         eval_every=eval_every, held_out_docs=held_out_docs, seed=seed)
    report = train_reranker(cfg, encoder, kb, train, output, resume=not restart)
    typer.echo(json.dumps(report, indent=2))
