"""``python -m spacy_pel discover``: the command line over :mod:`spacy_pel.discovery.cluster`."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, Optional

import typer

from ..corpora import gold_spans, read_docbin, write_docbin
from ..discovery.cluster import DISCOVERED_KEY, MENTION_MARGIN, discover, gold_cluster_scores, resolve_linking
from ..discovery.gold_corpus import gold_to_cluster, put_back
from ..pipeline.linker import load_pipeline
from ..pipeline.linking_mode import LINKING
from ..pipeline.updating import require_linked_gold
from ._errors import (
    PIPELINE_HELP,
    cli_errors,
    fail,
    pipeline_folder,
    require_file,
    require_output_file,
    require_pipeline_or_kb,
)
from ._output import echo_color, echo_json

HELP = (
    "Cluster a corpus's gold mentions with the KB, giving new NIL:<n> ids to unlinked groups.\n\n"
    "Reads a gold-span .spacy corpus and a saved pipeline (--pipeline) or a KB folder (--kb), and writes a .spacy corpus whose "
    "mentions carry an entity id or a stable NIL cluster id, the gold ids kept in the pel_gold span group. Prints counts as "
    "JSON, with ARI and NMI against the gold ids when the corpus has them. "
    "Two ways to link: clustering inference (--linking cluster: mentions and entities in one graph, tuned by --threshold and "
    "--mention-margin), or the linker's own decisions with only its NIL mentions clustered (--linking pipeline: tuned by "
    "--mention-threshold alone), which auto picks for a pipeline that decides NIL with a classifier (a calibrated one) or applies candidate rules.\n\n"
    "In a pipeline with one pel_linker per KB, --linker NAME clusters the gold mentions of NAME's labels (default: the "
    "first linker's); the other labels' mentions stay unlinked in the output, or keep the ids of an earlier discover run "
    "whose output is given as CORPUS (new NIL ids are numbered after its).\n\n"
    "Example: python -m spacy_pel discover corpus/dev.spacy out.spacy --kb kbs/mesh --threshold 0.5 --mention-margin 0.3 "
    "(a calibrated pipeline: --pipeline training/pipeline_calibrated --mention-threshold 0.9)"
)

app = typer.Typer(add_completion=False)


def check_finite(value: Optional[float], option: str) -> None:
    """Refuse NaN and ±inf (NaN fails every comparison: every edge dropped, every mention a NIL cluster)."""
    if value is not None and not math.isfinite(value):
        fail(f"{option} must be a finite number, not {value}")


def check_options_used(linking: str, given: Dict[str, bool], auto: bool) -> None:
    """Refuse an option that the linking mode resolved to does not use (it would be ignored silently)."""
    if linking != "pipeline":
        return
    mode = "--linking pipeline" + (" (what auto picks for a linker that decides NIL with a classifier or applies candidate rules)" if auto else "")
    for option in ("--threshold", "--mention-margin"):
        if given[option]:
            fail(f"{option} is for clustering inference; {mode} keeps the linker's own NIL decisions and clusters its NIL "
                 "mentions by --mention-threshold alone: drop it, or give --linking cluster")


@app.command(help=HELP)
@cli_errors
def main(
    ctx: typer.Context,
    corpus: Path = typer.Argument(..., help="Gold-span .spacy corpus (from spacy_pel.convert)"),
    output: Path = typer.Argument(..., help="Where to write the .spacy corpus with discovered ids"),
    pipeline: Optional[Path] = typer.Option(None, "--pipeline", callback=pipeline_folder, help=PIPELINE_HELP),
    kb: Optional[Path] = typer.Option(None, "--kb", help="KB folder (instead of --pipeline)"),
    encoder: Optional[str] = typer.Option(None, "--encoder", help="Encoder (default: the KB's)"),
    k: int = typer.Option(10, "--k", help="Nearest mentions per mention in the graph"),
    threshold: Optional[float] = typer.Option(
        None, "--threshold", help="Clustering inference only: edge similarity floor λ (default: the linker's NIL "
        "threshold; none = no NIL clusters)"
    ),
    mention_threshold: Optional[float] = typer.Option(
        None, "--mention-threshold", help="Floor for mention–mention edges (clustering inference: default --threshold; "
        "--linking pipeline: default none, each NIL mention joins its --k nearest NIL mentions)"
    ),
    mention_margin: float = typer.Option(
        MENTION_MARGIN, "--mention-margin", help="Clustering inference only: β, a mention–mention edge outranks entity edges "
        f"only when this much stronger ({MENTION_MARGIN}: tuned on BC5CDR dev, benchmarks/discovery.md; 0: arboEL's)"
    ),
    linking: str = typer.Option(
        "auto", "--linking", help="cluster: clustering inference; pipeline: the linker's own decisions (rules, NIL "
        "strategy), and only the mentions it calls NIL clustered among themselves (give --mention-threshold); auto: "
        "cluster when the linker's NIL confidence is its best score and it has no candidate rules, else pipeline (a NIL classifier's threshold is a "
        "probability, not an edge floor)"
    ),
    linker_name: Optional[str] = typer.Option(None, "--linker", help="The pel_linker whose labels' gold mentions are "
                                              "clustered, in a pipeline with one per KB (default: the first)"),
):
    """Cluster the gold mentions of CORPUS that the linker links (--linker, one per KB: its labels') with
    the KB entities and write the result: each span's kb_id is its entity or a stable NIL:<n> cluster.
    Gold ids are kept in the span group pel_gold; all clustered spans are in pel_discovered and, less
    overlaps, with the other labels' mentions (:mod:`spacy_pel.discovery.gold_corpus`), in doc.ents. Prints counts JSON
    (with ARI/NMI against the gold ids of non-NIL mentions when the corpus has them, an alternative id
    read as its entity)."""
    require_pipeline_or_kb(pipeline, kb, encoder)
    require_file(corpus, "corpus")
    if k < 1:
        fail(f"--k must be at least 1, not {k}")
    check_finite(threshold, "--threshold")
    check_finite(mention_threshold, "--mention-threshold")
    check_finite(mention_margin, "--mention-margin")
    if mention_margin < 0:
        fail(f"--mention-margin must be at least 0, not {mention_margin}")
    if linking not in LINKING:
        fail(f"--linking must be one of {', '.join(LINKING)}, not {linking}")
    require_output_file(output, "output")
    if linker_name is not None and pipeline is None:
        fail("--linker names a pel_linker of --pipeline")
    margin_source = ctx.get_parameter_source("mention_margin")  # typer's own click: its ParameterSource, by name
    given = {"--threshold": threshold is not None,
             "--mention-margin": margin_source is not None and margin_source.name != "DEFAULT"}
    if linking == "pipeline":  # known before the pipeline loads
        check_options_used(linking, given, auto=False)
    nlp, linker = load_pipeline(pipeline, kb, encoder, linker_name)
    try:
        resolved = resolve_linking(linker, linking, threshold)
    except ValueError as err:
        fail(str(err))
    check_options_used(resolved, given, auto=linking == "auto")
    docs = read_docbin(nlp, corpus)
    require_linked_gold(corpus, docs, linker.mentions, linker.name, "cluster")
    aside, first_nil = gold_to_cluster(docs, linker.mentions)  # the linker's labels' gold mentions: one per KB
    if not any(gold_spans(doc) for doc in docs):
        typer.secho(f"warning: {corpus} has no gold mentions ({len(docs)} docs): nothing to cluster, the output has no "
                    "linked mentions", fg="yellow", err=True, color=echo_color())
    report: Dict[str, object] = dict(discover(linker, docs, k, DISCOVERED_KEY, threshold, mention_threshold, mention_margin,
                                              resolved, first_nil))
    report.update({"linker": linker.name, "k": k, "linking": resolved})
    if resolved == "pipeline":  # what was applied: the linker's own NIL decision, and the NIL mentions' edge floor
        report.update({"mention_threshold": mention_threshold})
    else:
        threshold = linker.threshold if threshold is None else threshold
        report.update({"threshold": threshold, "mention_threshold": threshold if mention_threshold is None else mention_threshold,
                       "mention_margin": mention_margin})
    canonical = linker.index.canonical if linker.index is not None else None  # an alternative id as its entity
    report["gold"] = gold_cluster_scores(docs, canonical=canonical)  # this linker's mentions, before the others return
    put_back(docs, aside)
    write_docbin(docs, output)
    echo_json(report)
