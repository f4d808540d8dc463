"""``python -m spacy_pel visualize``: the command line over :mod:`spacy_pel.evaluation.visualize`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..corpora import read_docbin
from ..evaluation.visualize import AUTO_URL, check_url_template, link_docs, render
from ..files import atomic_write
from ..pipeline.linker import load_pipeline
from ._errors import (
    PIPELINE_HELP,
    cli_errors,
    fail,
    pipeline_folder,
    require_file,
    require_not_input,
    require_output_file,
    require_pipeline_or_kb,
)

HELP = (
    "Link a corpus and write displaCy HTML whose entities link to their KB entries.\n\n"
    "Reads a .spacy corpus and a saved pipeline (--pipeline) or a KB folder (--kb), links the mentions of the first --limit documents "
    "(every one, as link and evaluate do; the pipeline's own NER left out, a span finder finds its own) and writes one "
    "HTML file: each mention shows its id and NIL confidence, and hovering it shows its top candidates (a mention "
    "overlapping a longer one is linked but not drawn, and counted). "
    "--url-template sets the link for your own KB.\n\n"
    "Example: python -m spacy_pel visualize corpus/demo.spacy metrics/demo.html --pipeline training/demo_pipeline --limit 5"
)

app = typer.Typer(add_completion=False)


@app.command(help=HELP)
@cli_errors
def main(
    corpus: Path = typer.Argument(..., help=".spacy corpus whose entities are linked"),
    output: Path = typer.Argument(..., help="HTML file to write"),
    pipeline: Optional[Path] = typer.Option(None, "--pipeline", callback=pipeline_folder, help=PIPELINE_HELP),
    kb: Optional[Path] = typer.Option(None, "--kb", help="KB folder (instead of --pipeline)"),
    limit: int = typer.Option(10, "--limit", help="How many documents to render"),
    url_template: str = typer.Option(AUTO_URL, "--url-template", help="KB link, {} is the id; auto: MeSH, OMIM and "
                                     "HPO ids link to their browsers, other ids to nothing"),
):
    """Link the entities of the first --limit documents and render them with KB links."""
    require_pipeline_or_kb(pipeline, kb)
    require_file(corpus, "corpus")
    if limit < 1:
        fail(f"--limit must be at least 1, not {limit}")
    check_url_template(url_template)
    require_output_file(output, "output")
    require_not_input(output, [corpus])
    nlp, _ = load_pipeline(pipeline, kb)
    docs, not_drawn = link_docs(nlp, read_docbin(nlp, corpus)[:limit])
    html = render(docs, url_template, not_drawn)
    atomic_write(output, lambda tmp: tmp.write_text(html, encoding="utf8"))  # a failed write keeps an earlier page
    hidden = f"; {not_drawn} linked mention(s) overlapping a longer one not drawn" if not_drawn else ""
    typer.echo(f"wrote {output} ({len(docs)} documents{hidden})")
