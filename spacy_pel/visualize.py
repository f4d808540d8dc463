"""``python -m spacy_pel.visualize``: link a corpus and write displaCy HTML whose entities link to the KB."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

import typer
from spacy import displacy
from spacy.language import Language
from spacy.tokens import Doc

from .corpora import read_docbin
from .linker import load_pipeline

MESH_URL = "https://meshb.nlm.nih.gov/record/ui?ui={}"


def render(docs: Iterable[Doc], url_template: str = MESH_URL) -> str:
    """displaCy entity HTML; each entity shows its kb id linked through ``url_template``."""
    return displacy.render(list(docs), style="ent", page=True, options={"kb_url_template": url_template})


def link_docs(nlp: Language, docs: Iterable[Doc]) -> list:
    """Run the pipeline's components over docs that already carry entities (e.g. gold spans)."""
    docs = list(docs)
    for _, proc in nlp.pipeline:
        docs = list(proc.pipe(docs))
    return docs


app = typer.Typer(add_completion=False, help=__doc__)


@app.command()
def main(
    corpus: Path = typer.Argument(..., help=".spacy corpus whose entities are linked"),
    output: Path = typer.Argument(..., help="HTML file to write"),
    pipeline: Optional[Path] = typer.Option(None, "--pipeline", help="Saved pipeline with pel_linker"),
    kb: Optional[Path] = typer.Option(None, "--kb", help="KB folder (instead of --pipeline)"),
    limit: int = typer.Option(10, "--limit", help="How many documents to render"),
    url_template: str = typer.Option(MESH_URL, "--url-template", help="KB link, {} is the id"),
):
    """Link the entities of the first --limit documents and render them with KB links."""
    if pipeline is None and kb is None:
        raise typer.BadParameter("give --pipeline or --kb")
    nlp, _ = load_pipeline(pipeline, kb)
    docs = link_docs(nlp, read_docbin(nlp, corpus)[:limit])
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render(docs, url_template), encoding="utf8")
    typer.echo(f"wrote {output} ({len(docs)} documents)")


if __name__ == "__main__":
    app()
