"""``python -m spacy_pel silver``: the command line over :mod:`spacy_pel.training.silver`."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import spacy
import typer
from tqdm.auto import tqdm

from ..corpora import write_docbin
from ..files import BadLines
from ..kb import READERS, read_kb
from ..training.silver import LABEL, NameMatcher, SilverStats, raw_texts, silver_docs
from ._errors import cli_errors, fail, require_file, require_not_input, require_output_file
from ._output import echo_json

HELP = (
    "Find a KB's unambiguous names in raw text and write them as linked training mentions.\n\n"
    "Reads raw text (.txt files, one document a line, or any corpus convert reads, its annotations unused) and a KB, and writes "
    "a .spacy corpus of these silver mentions in context, training data for adapt --paths.train. --swap writes a share of them "
    "with another synonym of their entity.\n\n"
    "Example: python -m spacy_pel silver abstracts.txt --kb my_kb.jsonl --format jsonl -o corpus/silver.spacy --swap 0.5"
)

app = typer.Typer(add_completion=False)


@app.command(help=HELP)
@cli_errors
def main(
    texts: List[Path] = typer.Argument(..., help="Raw text: .txt files (one document a line) or corpora in any "
                                       "format convert reads (their annotations are not used)"),
    kb: Path = typer.Option(..., "--kb", help="KB file or folder (as build-kb reads it)"),
    format: str = typer.Option("jsonl", "--format", help=f"KB format: {', '.join(READERS)}"),
    output: Path = typer.Option(..., "--output", "-o", help=".spacy corpus to write"),
    types: Optional[List[str]] = typer.Option(None, "--types", help="Keep entities of these KB types only "
                                              "(repeat the option; default: every entity)"),
    swap: float = typer.Option(0.0, "--swap", help="Share of the mentions written with another name of their entity"),
    max_per_entity: int = typer.Option(50, "--max-per-entity", help="Mentions kept per entity at most (0 = all): "
                                       "a frequent generic name (disease) does not crowd out the rest"),
    short_forms: bool = typer.Option(False, "--short-forms/--no-short-forms", help="Also take an abbreviation the text "
                                     "defines for a matched name (dilated cardiomyopathy (DCM)) as a mention of its "
                                     "entity, wherever it occurs after the definition"),
    label: str = typer.Option(LABEL, "--label", help="Span label of the mentions"),
    seed: int = typer.Option(0, "--seed"),
    skip_bad_lines: bool = typer.Option(False, "--skip-bad-lines", help="Skip malformed lines (a corpus's bad "
                                        "annotation lines, a .txt file's lines that are not UTF-8; counted and shown) "
                                        "instead of stopping at the first"),
):
    """Find the names of exactly one KB entity in raw text and write them as linked mentions, in their
    context: training data for `adapt --paths.train` from a KB and unannotated text."""
    if format not in READERS:
        fail(f"unknown KB format {format!r}; known: {', '.join(READERS)}")
    for path in texts:
        require_file(path, "text")
    if not kb.exists():
        fail(f"KB not found: {kb}")
    if max_per_entity < 0:
        fail("--max-per-entity must be 0 or more")
    if not 0 <= swap <= 1:
        fail("--swap must be in [0, 1]")
    require_output_file(output, "output")
    require_not_input(output, [*texts, kb])
    nlp = spacy.blank("en")
    matcher = NameMatcher(read_kb(kb, format), types or None, stop_words=nlp.Defaults.stop_words,
                          short_forms=short_forms)
    if not matcher.keys:
        fail(f"no entity of the types {', '.join(types or [])} in {kb}" if types else f"no name to match in {kb}")
    stats = SilverStats()
    bad_lines = BadLines() if skip_bad_lines else None
    all_texts = tqdm((text for path in texts for text in raw_texts(nlp, path, bad_lines)), desc="silver",
                     unit=" docs", smoothing=0.05, disable=None)  # None: no bar when stderr is no terminal
    docs = list(silver_docs(nlp, all_texts, matcher, swap, seed, stats, label, max_per_entity))  # a DocBin holds them all anyway
    if not stats.mentions:  # checked before writing: an earlier corpus at OUTPUT is kept
        fail(f"no name of {kb} found in the text of {', '.join(map(str, texts))}: nothing written")
    written = write_docbin(docs, output)
    skipped = {"skipped_lines": bad_lines.count, "skipped_examples": bad_lines.examples} if bad_lines else {}
    echo_json({**stats.to_dict(), "written": written, "output": str(output), **skipped})
