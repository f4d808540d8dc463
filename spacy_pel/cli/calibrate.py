"""``python -m spacy_pel calibrate``: the command line over :mod:`spacy_pel.evaluation.nil`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..evaluation.nil import NIL_STRATEGIES, calibrate
from ..pipeline.mention_finders import check_finds_mentions
from ._errors import (
    PIPELINE_HELP,
    cli_errors,
    fail,
    pipeline_folder,
    require_dir,
    require_file,
    require_one_of,
    require_output_file,
    require_writable_parent,
)
from ._output import echo_json

HELP = (
    "Fit how a pipeline decides that a mention has no KB entity (NIL), and save it.\n\n"
    "Reads a saved pipeline and a gold .spacy corpus with NIL mentions, chooses the NIL threshold with the best NIL F1 (--nil "
    "classifier or classifier_pairs first fits a logistic model over the NIL evidence) and writes the calibrated pipeline to "
    "--output; --plot saves the precision-recall curve. With --e2e, for a pipeline that finds its own mentions, the threshold "
    "with the best strict end-to-end F1 on raw text is chosen instead.\n\n"
    "Example: python -m spacy_pel calibrate training/pipeline corpus/bc5cdr_dev.spacy -o training/pipeline_calibrated --nil "
    "classifier_pairs --max-r1-loss 0.01"
)

app = typer.Typer(add_completion=False)


@app.command(help=HELP)
@cli_errors
def main(
    pipeline: Path = typer.Argument(..., callback=pipeline_folder, help=PIPELINE_HELP),
    corpus: Path = typer.Argument(..., help="Gold .spacy corpus with NIL mentions (e.g. BC5CDR dev); without any, the pipeline is saved as it is"),
    output: Path = typer.Option(..., "--output", "-o", help="Where to save the calibrated pipeline: a new or empty folder, or a pipeline folder (the pipeline itself, an earlier calibration)"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="PNG of the NIL precision-recall curve (with --e2e: strict P/R/F1 against the threshold)"),
    nil: str = typer.Option("top_score", "--nil", help="top_score: a threshold on the best score; classifier: "
                            "a logistic model over the NIL evidence (score, margin, rule match, type fit, name similarity), then a threshold; "
                            "classifier_pairs: the same over the evidence and its pairwise products"),
    max_r1_loss: Optional[float] = typer.Option(None, "--max-r1-loss", help="At most this share of in-KB mentions "
                                                "linked right may become NIL (e.g. 0.01)"),
    e2e: bool = typer.Option(False, "--e2e", help="For a pipeline that finds its own mentions: the threshold on its NIL "
                             "confidence with the best strict end-to-end F1 on the corpus's raw text (drops spurious "
                             "found spans too; needs no NIL mention; keeps the pipeline's NIL strategy, unless --nil "
                             "classifier: a logistic model of a found span being a strict hit, the span model's "
                             "probability among its evidence)"),
    linker: Optional[str] = typer.Option(None, "--linker", help="The pel_linker to calibrate, in a pipeline with one "
                                         "per KB, on the gold mentions (with --e2e: and found spans) of its labels "
                                         "(default: the first); each linker's record is its nil_calibration.NAME.json"),
):
    """Fit the NIL decision (threshold, and the classifier with --nil classifier) with the best NIL F1
    and write it into the pipeline's config; with --e2e, the threshold with the best strict end-to-end F1."""
    require_one_of(nil, NIL_STRATEGIES, "--nil")
    if e2e and max_r1_loss is not None:
        fail("--e2e bounds nothing: leave out --max-r1-loss")
    require_dir(pipeline, "pipeline", "config.cfg")
    if e2e:
        check_finds_mentions(pipeline, "--e2e")
    require_file(corpus, "corpus")
    require_writable_parent(output, "output")
    if plot is not None:
        require_output_file(plot, "plot")
    echo_json(calibrate(pipeline, corpus, output, plot, nil=nil, max_r1_loss=max_r1_loss, e2e=e2e, linker_name=linker))
