"""``python -m spacy_pel evaluate``: the command line over :mod:`spacy_pel.evaluation.linking`."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Optional

import typer
from tqdm.auto import tqdm

from ..corpora import bare_doc, corpus_ids, raw_doc, read_docbin, require_gold_spans
from ..evaluation.errors import mention_errors, summary, summary_markdown, surface_ids
from ..evaluation.linking import (
    E2E_MEASURES,
    canonical_ids,
    e2e_metrics,
    linker_scope,
    markdown,
    mention_table,
    metrics,
    pipeline_nil_labels,
    pipeline_scope,
)
from ..evaluation.metrics import exact, shown
from ..files import atomic_write, is_stream, write_jsonl
from ..pipeline.linker import PELLinker, configure_linker, load_pipeline
from ..pipeline.mention_finders import check_finds_mentions
from ..pipeline.updating import require_linked_gold
from ._errors import (
    PIPELINE_HELP,
    cli_errors,
    fail,
    one_line,
    pipeline_folder,
    require_file,
    require_not_input,
    require_pipeline_or_kb,
    require_writable_parent,
)

HELP = (
    "Measure a linker's recall@k, NIL precision, recall and F1, and speed on a gold corpus.\n\n"
    "Reads a gold .spacy corpus and a saved pipeline (--pipeline) or a KB folder (--kb), and prints a markdown table; --output, "
    "--markdown and --errors also write a JSON report, the table and the mentions linked wrongly. --train adds seen/unseen "
    "figures; --e2e runs the pipeline on raw text and scores the spans it finds (every linker's; with --linker, that "
    "linker's labels').\n\n"
    "Example: python -m spacy_pel evaluate corpus/bc5cdr_dev.spacy --pipeline training/pipeline_calibrated --train "
    "corpus/bc5cdr_train.spacy --markdown metrics/bc5cdr_dev.md"
)

app = typer.Typer(add_completion=False)


def e2e_markdown(report: dict, title: str) -> str:
    """The table of an ``--e2e`` report, each figure formatted once from the exact one (n/a: undefined)."""
    thresholds = ", ".join(f"{name} {'none' if t is None else shown(t)} ({report['nil_strategy'][name]})"
                           for name, t in report["threshold"].items())
    return (f"# {title}\n\n| | P | R | F1 |\n|---|---:|---:|---:|\n"
            + "".join(f"| {k} | {shown(report[k]['p'])} | {shown(report[k]['r'])} | {shown(report[k]['f'])} |\n"
                      for k in E2E_MEASURES)
            + (f"\nthe found and gold spans of the labels {report['linker']} links\n" if report["linker"] else "")
            + f"\nNIL threshold (NIL strategy): {thresholds}\n"
            + f"\n{report['docs']} documents (the {report['tokens']}'s tokens), {report['seconds']} s, "
              f"{report['predicted_mentions_per_s']} predicted mentions/s\n")


@app.command(help=HELP)
@cli_errors
def main(
    corpus: Path = typer.Argument(..., help="Gold .spacy corpus (from spacy_pel.convert)"),
    pipeline: Optional[Path] = typer.Option(None, "--pipeline", callback=pipeline_folder, help=PIPELINE_HELP),
    kb: Optional[Path] = typer.Option(None, "--kb", help="KB folder (instead of --pipeline)"),
    encoder: Optional[str] = typer.Option(None, "--encoder", help="Encoder (default: the KB's)"),
    train: Optional[Path] = typer.Option(None, "--train", help="Training corpus, for seen/unseen figures"),
    threshold: Optional[float] = typer.Option(None, "--threshold", help="NIL threshold (default: the pipeline's)"),
    output: Optional[Path] = typer.Option(None, "--output", help="Write the JSON report here"),
    md: Optional[Path] = typer.Option(None, "--markdown", help="Write a markdown table here"),
    errors: Optional[Path] = typer.Option(None, "--errors", help="Write the mentions linked wrongly here (JSONL: "
                                          "mention in context, gold and predicted entity, the gold's rank, and a "
                                          "cause: a KB name of the gold or not, a training alias or not)"),
    title: str = typer.Option("spacy_pel evaluation", "--title"),
    e2e: bool = typer.Option(False, "--e2e", help="Run the pipeline on the raw text (its span finder) and score strict/partial P/R/F1"),
    corpus_tokens: bool = typer.Option(False, "--corpus-tokens", help="With --e2e: give the pipeline the corpus's tokens "
                                       "(split at the gold mentions' boundaries) instead of tokenizing the text as a user's "
                                       "text is; figures before session 22 were measured this way"),
    linker_name: Optional[str] = typer.Option(None, "--linker", help="The pel_linker measured, in a pipeline with one "
                                              "per KB, on the gold mentions of its labels (default: the first; with "
                                              "--e2e, every linker's found spans, each against its own KB)"),
):
    """Recall@k, seen/unseen, NIL P/R/F1 and mentions/s of a linker on a gold corpus."""
    require_pipeline_or_kb(pipeline, kb, encoder)
    require_file(corpus, "corpus")
    require_file(train, "training corpus")
    if threshold is not None and not math.isfinite(threshold):
        fail(f"--threshold must be a finite number, not {threshold}")
    if errors is not None and e2e:
        fail("--errors lists gold mentions linked wrongly: it goes without --e2e")
    if train is not None and e2e:
        fail("--train adds seen/unseen figures of the gold mentions: it goes without --e2e (found spans are not gold mentions)")
    written = [(option, path) for option, path in (("--output", output), ("--markdown", md), ("--errors", errors)) if path]
    for i, (option, path) in enumerate(written):
        if path.is_dir():
            fail(f"{path} is a folder; give a file name")
        require_writable_parent(path, "report")
        require_not_input(path, [corpus, train], option)
        same = next((other for other, earlier in written[:i] if earlier.resolve() == path.resolve()), None)
        if same is not None:
            fail(f"{same} and {option} are the same file {path}; give each its own")
    if linker_name is not None and pipeline is None:
        fail("--linker names a pel_linker of --pipeline")
    if e2e:
        if pipeline is None:
            fail("--e2e runs a pipeline on raw text: give --pipeline (one with a span finder or an NER)")
        check_finds_mentions(pipeline, "--e2e")
    nlp, linker = load_pipeline(pipeline, kb, encoder, linker_name)
    docs = read_docbin(nlp, corpus)
    require_gold_spans(corpus, docs, "nothing to evaluate")
    if linker_name is not None or not e2e:  # e2e without --linker scores every linker's labels
        require_linked_gold(corpus, docs, linker.mentions, linker.name, "evaluate")
    if e2e:
        # one linker's labels (--linker), or every linker's, each mention's ids spelt by its label's KB
        scope = linker_scope(linker) if linker_name is not None else pipeline_scope(nlp)
        if threshold is not None:  # every linker scored (--linker: that one), as a config override: nothing saved
            for name in [linker_name] if linker_name is not None else [n for n, p in nlp.pipeline if isinstance(p, PELLinker)]:
                try:
                    configure_linker(nlp, name, threshold=threshold)
                except ValueError as err:  # outside the range of the linker's confidence
                    fail(f"--threshold: {one_line(err)}")
        # the text as a user gives it: the corpus's tokens are split at the gold boundaries, which leaks them
        raw = [bare_doc(d, nlp.vocab) if corpus_tokens else raw_doc(nlp, d) for d in docs]
        t0 = time.perf_counter()
        predicted = list(tqdm(nlp.pipe(raw), total=len(raw), desc="linking documents", unit=" docs"))
        seconds = time.perf_counter() - t0
        # the NIL decision each scored linker applied (--threshold included): null = no threshold
        scored = [linker_name] if linker_name is not None else [n for n, p in nlp.pipeline if isinstance(p, PELLinker)]
        measured = e2e_metrics(predicted, docs, scope, pipeline_nil_labels(nlp))
        run = {"linker": linker_name, "threshold": {name: nlp.get_pipe(name).threshold for name in scored},
               "nil_strategy": {name: nlp.get_pipe_config(name).get("nil", {}).get("@misc") for name in scored},
               "docs": len(docs), "tokens": "corpus" if corpus_tokens else "pipeline", "seconds": round(seconds, 1),
               "predicted_mentions_per_s": round(sum(len(scope.found(d)) for d in predicted) / max(seconds, 1e-9), 1)}
        report = {**measured, **run}  # the JSON's figures rounded, the table's formatted once from the exact ones
        text = e2e_markdown({**exact(measured), **run}, title)
    else:
        train_ids = training = None
        if train:
            train_docs = read_docbin(nlp, train)
            linker.ensure_loaded()  # a linker made for --kb reads its KB at its first batch; its ids are needed now
            train_ids = canonical_ids(linker, corpus_ids(train_docs))
            training = surface_ids(train_docs, linker.index.canonical)
        rows, seconds = mention_table(linker, docs, progress=True)
        threshold = linker.threshold if threshold is None else threshold
        report = metrics(rows, seconds, linker.index.row, train_ids, threshold)
        text = markdown(report, title)  # each figure formatted once from the exact one; the JSON's rounded
        report.update({"corpus": str(corpus), "kb": str(kb or pipeline), "encoder": encoder or linker.index.encoder_source})
        if errors:
            found = mention_errors(rows, docs, linker.index, threshold, training, train_ids, linker.mentions)
            report["errors"] = summary(found)
            text += summary_markdown(report["errors"]) + f"- the errors, one per line: {errors}\n"
            write_jsonl(found, errors)
    # an output on stdout (/dev/stdout, a pipe) gets its data alone: the table goes to stderr
    typer.echo(text, err=any(is_stream(path) for _, path in written))
    if output:
        atomic_write(output, lambda tmp: tmp.write_text(json.dumps(report, indent=2), encoding="utf8"))
    if md:
        atomic_write(md, lambda tmp: tmp.write_text(text, encoding="utf8"))
