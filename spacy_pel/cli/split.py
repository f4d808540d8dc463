"""``python -m spacy_pel split``: the command line over :mod:`spacy_pel.corpus_split`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..corpus_split import PrimaryId, split_corpus
from ..retrieval.index import EntityIndex
from ..retrieval.table import EntityTable
from ._errors import cli_errors, fail, require_dir, require_file, require_output_file, run
from ._output import echo_json

HELP = (
    "Split one annotated corpus by document into a training part and a dev part.\n\n"
    "Reads a .spacy corpus (from convert) and writes two .spacy files: a share of its documents, drawn at random by a "
    "seed, as the dev part and the rest for training, each in the corpus's order. For a corpus that comes without a dev "
    "split; prints the documents, mentions and NIL mentions of each part, and how many dev mentions link an entity "
    "the training part never links (unseen: ids as written; with --kb, ids resolved through the KB as evaluate --train "
    "resolves them, mentions of ids the KB lacks counted as absent, so unseen is the dev report's unseen row).\n\n"
    "Example: python -m spacy_pel split corpus/mine_all.spacy corpus/mine_train_part.spacy corpus/mine_dev_part.spacy "
    "--dev-share 0.1"
)

app = typer.Typer(add_completion=False)


def kb_primary_ids(kb: Path) -> PrimaryId:
    """The primary id of the entity an id or alternative id names in the KB folder ``kb`` (None: not in it)."""
    EntityIndex.read_meta(kb)
    return EntityTable.read(kb).primary_ids()


@app.command(help=HELP)
@cli_errors
def main(
    corpus: Path = typer.Argument(..., help="The .spacy corpus to split (python -m spacy_pel convert makes one)"),
    train_output: Path = typer.Argument(..., help="The training part, a .spacy file"),
    dev_output: Path = typer.Argument(..., help="The dev part, a .spacy file"),
    dev_share: float = typer.Option(0.1, "--dev-share", help="Share of the documents in the dev part (0 to 1)"),
    seed: int = typer.Option(0, "--seed", help="Which documents: another seed draws others"),
    kb: Optional[Path] = typer.Option(None, "--kb", help="KB folder (build-kb): count unseen dev mentions as evaluate "
                                      "--train does (alternative ids resolved, ids the KB lacks counted as absent)"),
):
    """Split a corpus by document; prints the counts of both parts as JSON."""
    require_file(corpus, "corpus")
    if corpus.suffix.lower() != ".spacy":
        fail(f"corpus {corpus} is not a .spacy file: convert it first (python -m spacy_pel convert {corpus} CORPUS.spacy)")
    for output in (train_output, dev_output):
        if output.suffix.lower() != ".spacy":
            fail(f"output {output} should be a .spacy file")
        require_output_file(output, "output")
    if seed < 0:
        fail(f"--seed must be 0 or more, not {seed}")
    require_dir(kb, "KB folder")
    primary = kb_primary_ids(kb) if kb is not None else None
    echo_json(split_corpus(corpus, train_output, dev_output, dev_share, seed, primary=primary))


if __name__ == "__main__":
    run(app)
