"""``python -m spacy_pel label-types``: the span label → KB types map of the ``label_types`` rule,
learned from a training corpus's gold ids (:mod:`spacy_pel.pipeline.label_map`)."""
from __future__ import annotations

import configparser
import json
import tempfile
from pathlib import Path
from typing import List, Optional

import numpy as np
import spacy
import typer
from confection import ConfigValidationError

from ..corpora import read_docbin
from ..files import LineError, atomic_write
from ..pipeline.label_map import LabelTypes, learn_label_types, read_label_types, write_linker_config
from ..retrieval.index import EntityIndex
from ..retrieval.table import EntityTable
from ._errors import (
    cli_errors,
    fail,
    require_dir,
    require_file,
    require_not_input,
    require_output_file,
    require_writable_parent,
)
from ._output import echo_color, echo_json

HELP = (
    "Learn which KB types each span label can link to, for the linker's label_types rule.\n\n"
    "Reads annotated .spacy corpora and their KB folder (or takes a map given with --map, checked against the KB), keeps for each label the KB types that cover most of its gold "
    "entities, and writes the map as JSON; with --config and --config-out it also writes a pipeline config with the map "
    "inlined.\n\n"
    "Example: python -m spacy_pel label-types corpus/train.spacy --kb kbs/medic -o training/label_types.json --config "
    "configs/linker_rules.cfg --config-out training/linker_rules.cfg"
)

app = typer.Typer(add_completion=False)
LEARN = "learn"
SHOWN_TYPES = 10  # of the KB's types, in the error for a map naming others


def check_linker_config(config: Path) -> None:
    """Refuse, before anything is written, a --config that is not a readable config or has no (or several)
    pel_linker components with a label_types rule: the check is the write itself, to a scratch file."""
    try:
        with tempfile.TemporaryDirectory() as scratch:
            write_linker_config(config, {}, Path(scratch) / "config.cfg")
    except ConfigValidationError as err:
        detail = err.desc or str(err)  # the parser's own words open the last paragraph ("File contains no section headers.")
        reason = next((ln.strip() for ln in detail.split("\n\n")[-1].splitlines() if ln.strip()), "not valid")
        fail(f"--config {config} is not a pipeline config: {reason}")
    except LineError as err:  # FILE:LINE: not UTF-8 text (byte 0x.. at column N)
        fail(f"--config {config} is not a pipeline config: {err}")
    except (UnicodeDecodeError, configparser.Error) as err:
        fail(f"--config {config} is not a pipeline config: {str(err).splitlines()[0] if str(err) else type(err).__name__}")


def check_map_types(label_types: LabelTypes, given: str, kb: Path) -> None:
    """Refuse a given map naming KB types the KB's entities do not have: the rule would move every candidate of
    such a label down (none fits), as if the label were wrong."""
    EntityIndex.read_meta(kb)
    table = EntityTable.read(kb)
    used = np.unique(np.asarray(table.types.of)) if len(table.types) else []
    known = sorted({t for i in used for t in table.types.sets[int(i)]})
    unknown = sorted({t for types in label_types.values() for t in types} - set(known))
    if unknown:
        shown = ", ".join(known[:SHOWN_TYPES]) + (f", … ({len(known)} in all)" if len(known) > SHOWN_TYPES else "")
        fail(f"--map {given} names KB types that {kb} does not have: {', '.join(unknown)} "
             f"({'its types: ' + shown if known else 'its entities have no types'})")


@app.command(help=HELP)
@cli_errors
def main(
    corpora: Optional[List[Path]] = typer.Argument(None, help="Annotated .spacy corpora (e.g. corpus/bc5cdr_train.spacy) "
                                                    "to learn the map from; not needed with --map"),
    kb: Path = typer.Option(..., "--kb", help="KB folder (build-kb) whose entity types are counted"),
    output: Path = typer.Option(..., "--output", "-o", help="label → KB types JSON to write"),
    given: str = typer.Option(LEARN, "--map", help="A label → types JSON to use instead of learning one ('learn': learn it)"),
    coverage: float = typer.Option(0.95, "--coverage", help="Share of a label's in-KB gold mentions the kept types cover"),
    min_share: float = typer.Option(0.01, "--min-share", help="A type adding fewer of a label's mentions than this share is not kept"),
    config: Optional[Path] = typer.Option(None, "--config", help="Pipeline config with a label_types rule (e.g. configs/linker_rules.cfg)"),
    config_out: Optional[Path] = typer.Option(None, "--config-out", help="Write --config here with the map inlined (for spacy assemble)"),
):
    """Count, per span label, the KB types of the gold entities and keep the types that cover most of
    them; prints the map and what each type adds. With --config/--config-out, writes the pipeline
    config with the map in its label_types rule."""
    corpora = list(corpora or [])
    if given == LEARN and not corpora:
        fail("give the annotated .spacy corpora to learn the map from (or a map with --map)")
    for corpus in corpora:
        require_file(corpus, "corpus")
    require_dir(kb, "KB folder")
    if (config is None) != (config_out is None):
        fail("give --config and --config-out together")
    if output.is_dir():
        fail(f"output {output} is a folder; give a .json file name")
    inputs = [*corpora, config]
    require_not_input(output, inputs)  # --map may be the output too: read whole before the map is written back
    require_not_input(config_out, [*inputs, None if given == LEARN else Path(given)], "--config-out")
    if config_out is not None and output.resolve() == config_out.resolve():
        fail(f"output {output} is --config-out too; give the map JSON and the pipeline config two file names")
    require_writable_parent(output, "output")
    if not 0 < coverage <= 1 or not 0 <= min_share < 1:
        fail("--coverage must be in (0, 1] and --min-share in [0, 1)")
    if config is not None:  # all checked before anything is written
        require_file(config, "pipeline config")
        require_output_file(config_out, "--config-out")
        check_linker_config(config)
    if given != LEARN:
        require_file(Path(given), "--map")
        label_types, report = read_label_types(given), {"given": given}
        check_map_types(label_types, given, kb)
    else:
        nlp = spacy.blank("en")
        docs = [d for c in corpora for d in read_docbin(nlp, c)]
        label_types, report = learn_label_types(docs, EntityIndex.from_disk(kb), coverage, min_share)
        if not any(r["mentions"] for r in report.values()):
            typer.secho(f"warning: no gold mentions in {', '.join(map(str, corpora))} ({len(docs)} docs): nothing to learn "
                        "from, the map is empty (the rule does nothing)", fg="yellow", err=True, color=echo_color())
        elif not label_types:
            typer.secho("warning: no label has in-KB gold mentions with KB types: the map is empty (the rule does nothing)",
                        fg="yellow", err=True, color=echo_color())
    atomic_write(output, lambda tmp: tmp.write_text(json.dumps(label_types, indent=2) + "\n", encoding="utf8"))
    echo_json({"label_types": label_types, "report": report})
    if config is not None:
        write_linker_config(config, label_types, config_out)
        typer.echo(f"{config} with this map → {config_out}", err=True)
    if given != LEARN and not label_types:
        typer.secho(f"warning: --map {given} is empty: the rule does nothing", fg="yellow", err=True, color=echo_color())
