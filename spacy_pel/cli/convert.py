"""``python -m spacy_pel convert``: annotated corpora (PubTator, BioC XML / JSON, Prodigy JSONL, .spacy) → one spaCy
DocBin with linked gold entities."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import spacy
import typer

from ..corpus_formats import FORMATS, convert_corpora
from ..id_map import read_id_map
from ._errors import cli_errors, fail, require_file, require_not_input, require_writable_parent, run
from ._output import echo_color, echo_json, echo_skipped

HELP = (
    "Convert annotated corpora into one spaCy .spacy file of linked gold mentions.\n\n"
    "Reads PubTator, BioC XML or JSON, Prodigy JSONL (or link's .jsonl output), or .spacy files (several inputs go into one "
    "output, each document once) and writes a DocBin whose gold "
    "mentions carry their KB ids, NIL for a mention with none. Prints counts of mentions, NIL, composite and unaligned mentions "
    "as JSON; --labels keeps some mention types, --id-map rewrites ids of an older KB release, --strip-id-prefix removes a "
    "namespace the KB's ids lack (UMLS: for MedMentions against a UMLS KB).\n\n"
    "Example: python -m spacy_pel convert assets/bc5cdr/CDR_DevelopmentSet.PubTator.txt corpus/bc5cdr_dev.spacy"
)

app = typer.Typer(add_completion=False)


@app.command(help=HELP)
@cli_errors
def main(
    inputs: List[Path] = typer.Argument(
        ..., help="Corpus file(s): PubTator (BC5CDR, NCBI disease, MedMentions, BioRED), BioC XML (.xml) or "
        "JSON (.json), Prodigy tasks (.jsonl: entity-linking choices, or spans with a kb_id; link's own .jsonl output too), or "
        ".spacy; several are concatenated into one output (a document id an earlier input had is refused)"
    ),
    output: Path = typer.Argument(..., help="Output .spacy file"),
    format: Optional[str] = typer.Option(
        None, "--format", help=f"Format of every input ({'|'.join(FORMATS)}); default: by extension (.xml, .json, .jsonl, .spacy, else PubTator)"
    ),
    lang: str = typer.Option("en", "--lang", help="Language of the blank tokenizer"),
    skip_bad_lines: bool = typer.Option(
        False, "--skip-bad-lines", help="Leave out malformed lines / annotations (counted and listed) instead of stopping at the first"
    ),
    labels: Optional[List[str]] = typer.Option(
        None, "--labels", help="Keep only mentions of this type (repeat for several, e.g. --labels Disease); the others are counted, by type"
    ),
    id_map: Optional[Path] = typer.Option(
        None, "--id-map", help="Tab-separated OLD_ID<TAB>NEW_ID lines: gold ids of an older KB release rewritten to the "
        "current ones (NEW_ID NIL: retired); the mentions changed are counted, by old id"
    ),
    strip_id_prefix: Optional[List[str]] = typer.Option(
        None, "--strip-id-prefix", help="Remove this prefix from gold ids that start with it, before --id-map (repeat for "
        "several; e.g. UMLS: for MedMentions against a UMLS KB, MESH: for PubTator3 exports against MeSH)"
    ),
):
    """Convert annotated corpora; prints counts of mentions, NIL, composite, overlapping and unaligned
    mentions, and of the relations left out (by type)."""
    for path in inputs:
        require_file(path, "corpus file")
    if format is not None and format not in FORMATS:
        fail(f"--format {format!r} is not one of {', '.join(FORMATS)}")
    if output.is_dir():
        fail(f"output {output} is a folder; give a .spacy file name")
    if output.suffix.lower() != ".spacy":
        fail(f"output {output} should be a .spacy file (it is a DocBin; the inputs come first)")
    require_not_input(output, inputs)
    require_writable_parent(output, "output")
    try:
        spacy.util.get_lang_class(lang)
    except Exception:  # spaCy raises ImportError / its own errors for an unknown language code
        fail(f"--lang {lang!r} is not a language spaCy knows (e.g. en, de, fr)")
    mapping = None
    if id_map is not None:
        require_file(id_map, "id map")
        mapping = read_id_map(id_map)
    stats = convert_corpora(inputs, output, lang, skip_bad_lines=skip_bad_lines, format=format, labels=labels or None,
                            id_map=mapping, strip_id_prefixes=strip_id_prefix or ())
    echo_json(stats)
    if stats["relations_skipped"]:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(stats["relations_skipped"].items()))
        typer.echo(f"left out relation lines (not mentions): {kinds}", err=True)
    echo_skipped(stats)
    if stats["remapped"]:
        typer.echo(f"{sum(stats['remapped'].values())} mention(s) of {len(stats['remapped'])} old id(s) rewritten by the id map", err=True)
    if stats["prefix_stripped"]:
        stripped = ", ".join(f"{n} {prefix}" for prefix, n in sorted(stats["prefix_stripped"].items()))
        typer.echo(f"gold ids with a prefix removed: {stripped}", err=True)
    if stats["left_out_by_answer"]:
        answers = ", ".join(f"{n} {answer}" for answer, n in sorted(stats["left_out_by_answer"].items()))
        typer.echo(f"left out Prodigy tasks that were not accepted: {answers}", err=True)
    if stats["unaligned"]:
        typer.secho(f"{stats['unaligned']} mention(s) could not be aligned to tokens (listed above)", fg="yellow", err=True, color=echo_color())


if __name__ == "__main__":
    run(app)
