"""``python -m spacy_pel retarget``: the command line over :mod:`spacy_pel.pipeline.retarget`."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..pipeline.retarget import labels_without_kb_types, retarget
from ._errors import PIPELINE_HELP, cli_errors, pipeline_folder, require_dir, require_writable_parent

HELP = (
    "Make a trained pipeline link against another KB, keeping its rules and settings.\n\n"
    "Reads a saved pipeline and a KB folder from build-kb (with --names, that KB's name rows from build-names) and writes a "
    "self-contained pipeline with the new KB and its encoder saved in it. Calibrate its NIL decision again on a corpus of the "
    "new KB.\n\n"
    "Example: python -m spacy_pel retarget training/pipeline_calibrated --kb kbs/onto --names kbs/onto_names -o "
    "training/pipeline_onto"
)

app = typer.Typer(add_completion=False)


@app.command(help=HELP)
@cli_errors
def main(
    pipeline: Path = typer.Argument(..., callback=pipeline_folder, help=PIPELINE_HELP),
    kb: Path = typer.Option(..., "--kb", help="The KB folder to link against (from build-kb)"),
    output: Path = typer.Option(..., "--output", "-o", help="Pipeline folder to write"),
    names: Optional[Path] = typer.Option(None, "--names", help="The KB's name rows (from build-names), for a pipeline with a name-rows rule"),
    encoder: Optional[str] = typer.Option(None, "--encoder", help="Encoder (default: the pipeline's own when its entity tower encoded the KB, as for a new release of its KB; else the one that built the KB, from its meta.json)"),
    linker: Optional[str] = typer.Option(None, "--linker", help="The pel_linker to retarget, in a pipeline with one per "
                                         "KB (required there; the others keep their KB)"),
):
    """Write a trained pipeline that links against another KB."""
    require_dir(pipeline, "pipeline", "config.cfg")
    require_dir(kb, "KB folder", "meta.json")
    require_dir(names, "name rows", "meta.json")
    require_writable_parent(output, "output")
    nlp, overrides = retarget(pipeline, kb, output, names, encoder, linker)
    kept = [] if any(k.endswith(".encoder") for k in overrides) else ["the pipeline's own encoder kept (its entity tower encoded the KB)"]
    typer.echo(f"wrote {output}: " + ", ".join([*(f"{k} = {v}" for k, v in overrides.items()), *kept]))
    unfitting = labels_without_kb_types(nlp, linker)
    if unfitting:
        typer.echo("note: this KB has none of the types the pipeline maps these labels to: "
                   + "; ".join(f"{label} → {', '.join(types)}" for label, types in unfitting.items())
                   + " (the label-types rule leaves them as they are and the NIL classifier sees no fitting type; "
                   "learn a map with python -m spacy_pel label-types on a corpus of this KB, then calibrate)", err=True)
