"""``python -m spacy_pel train-reranker``: the command line over :mod:`spacy_pel.training.reranker`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..retrieval.build import load_encoder
from ..training.config_files import RerankerFile, train_reranker_from_config
from ._errors import cli_errors, require_file
from ._output import echo_json
from .train import read_typed_config

HELP = (
    "Train a cross-encoder re-ranker on the retriever's own top candidates.\n\n"
    "Reads a trained retriever, the KB folder built with it and a training .spacy corpus, and writes the re-ranker to "
    "OUTPUT/best with a report on held-out mentions; a re-run resumes from OUTPUT/last (--restart starts over). Settings come "
    "from --config or its defaults, and each flag overrides one.\n\n"
    "Example: python -m spacy_pel train-reranker --config configs/train_reranker.cfg -o training/reranker --encoder "
    "training/retriever/best --kb kbs/mesh --train corpus/train.spacy"
)

app = typer.Typer(add_completion=False)
D = RerankerFile()


@app.command(help=HELP, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@cli_errors
def main(
    ctx: typer.Context,
    output: Path = typer.Option(..., "--output", "-o", help="Folder: best/ (the cross-encoder), last/, candidates, report"),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Typed config (configs/train_reranker.cfg); without it, its defaults"),
    encoder: Optional[str] = typer.Option(None, "--encoder", help="\\[paths] encoder: the retriever (bi-encoder folder) whose candidates are re-ranked"),
    kb: Optional[Path] = typer.Option(None, "--kb", help="\\[paths] kb: KB folder built with that encoder"),
    train: Optional[Path] = typer.Option(None, "--train", help="\\[paths] train: training .spacy corpus with gold mentions and ids"),
    base: Optional[str] = typer.Option(None, "--base", help=f"Model to start from (Hugging Face name/folder or a cross-encoder) [{D.model.base}]"),
    candidates: Optional[int] = typer.Option(None, "--candidates", help=f"Retriever candidates per mention [{D.mining.candidates}]"),
    mention_length: Optional[int] = typer.Option(None, "--mention-length", help=f"Word pieces of the mention side [{D.model.mention_max_length}]"),
    entity_length: Optional[int] = typer.Option(None, "--entity-length", help=f"Word pieces of the entity side [{D.model.entity_max_length}]"),
    batch_mentions: Optional[int] = typer.Option(None, "--batch-mentions", help=f"Mentions per step [{D.training.batch_mentions}]"),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help=f"[{D.training.max_steps}]"),
    lr: Optional[float] = typer.Option(None, "--lr", help=f"[{D.training.lr}]"),
    eval_every: Optional[int] = typer.Option(None, "--eval-every", help=f"Held-out evaluation every N steps [{D.training.eval_every}]"),
    held_out_docs: Optional[int] = typer.Option(None, "--held-out-docs", help=f"Last N training docs kept out [{D.training.held_out_docs}]"),
    seed: Optional[int] = typer.Option(None, "--seed", help=f"[{D.training.seed}]"),
    restart: bool = typer.Option(False, "--restart", help="Start over instead of resuming from OUTPUT/last"),
):
    """Train the cross-encoder re-ranker on the retriever's own top candidates (resumes by default).
    Settings come from --config (or its defaults); each flag, and --section.key value, overrides one."""
    flags = {"paths.encoder": encoder, "paths.kb": kb, "paths.train": train, "model.base": base,
             "mining.candidates": candidates, "model.mention_max_length": mention_length,
             "model.entity_max_length": entity_length, "training.batch_mentions": batch_mentions,
             "training.max_steps": max_steps, "training.lr": lr, "training.eval_every": eval_every,
             "training.held_out_docs": held_out_docs, "training.seed": seed}
    cfg, raw = read_typed_config(RerankerFile, ctx, config, flags)
    require_file(Path(cfg.paths.train), "training corpus")
    load_encoder(cfg.paths.encoder, precision="fp32")  # a missing encoder: one line, before any output folder is made
    report = train_reranker_from_config(cfg, raw, output, resume=not restart)
    echo_json(report)
