"""Foundation benchmark (issue 2): full-MeSH KB build and the untrained default encoder on BC5CDR dev.

    python benchmarks/foundation.py --kb kbs/mesh --dev corpus/bc5cdr_dev.spacy --train corpus/bc5cdr_train.spacy

Writes benchmarks/foundation.json and benchmarks/foundation.md. The KB must have been built first:
    python -m spacy_pel.build_kb --kb ../shared/data/mesh --format mesh --output kbs/mesh
"""
import json
import platform
import time
from pathlib import Path

import spacy
import torch
import typer

from spacy_pel.corpora import NIL, corpus_ids, gold_ids, gold_spans, read_docbin
from spacy_pel.evaluation.linking import markdown, mention_table, metrics

HERE = Path(__file__).resolve().parent


def exact_match_recall(index, docs) -> dict:
    """Baseline: a mention links to the entity whose name or synonym equals it (case-insensitive)."""
    table = {}
    for e in index.entities:
        for name in [e.name, *e.aliases]:
            table.setdefault(name.lower(), e.id)
    hits = n = 0
    for doc in docs:
        for span in gold_spans(doc):
            ids = gold_ids(span.kb_id_)
            if ids == [NIL] or not any(i in index.row for i in ids):
                continue
            n += 1
            hits += table.get(span.text.lower()) in ids
    return {"mentions": n, "R@1": round(hits / n, 4)}


def main(
    kb: Path = typer.Option(Path("kbs/mesh")),
    dev: Path = typer.Option(Path("corpus/bc5cdr_dev.spacy")),
    train: Path = typer.Option(Path("corpus/bc5cdr_train.spacy")),
    out: Path = typer.Option(HERE / "foundation"),
):
    build = json.loads((kb / "build_report.json").read_text())
    nlp = spacy.blank("en")
    t0 = time.perf_counter()
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb)})
    linker.ensure_loaded()
    load_s = time.perf_counter() - t0
    docs = read_docbin(nlp, dev)
    rows, seconds = mention_table(linker, docs, progress=True)
    report = metrics(rows, seconds, linker.index.row, corpus_ids(read_docbin(nlp, train)))
    report["exact_match_baseline"] = exact_match_recall(linker.index, docs)
    report["build"] = build
    report["kb_load_s"] = round(load_s, 1)
    report["machine"] = f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads"
    out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    md = [
        "# Foundation benchmark: full MeSH KB, untrained default encoder, BC5CDR dev",
        "",
        "Reproduce: `python -m spacy_pel.build_kb --kb ../shared/data/mesh --format mesh --output kbs/mesh` then",
        "`python benchmarks/foundation.py` (after `spacy project run convert`).",
        "",
        "## KB build (all MeSH 2024 descriptors + supplementary records)",
        "",
        "| entities | encoder | precision | index | wall time | encode time | entities/s |",
        "|---:|---|---|---|---:|---:|---:|",
        f"| {build['entities_total']:,} | {build['encoder']} | {build['precision']} | {build['index']} | "
        f"{build['wall_s'] / 60:.1f} min | {build['encode_s'] / 60:.1f} min | {build['entities_per_s']} |",
        "",
        f"Machine: {report['machine']}. KB load time in the component: {report['kb_load_s']} s.",
        "",
        markdown(report, "Linking BC5CDR dev (gold mentions) against the full MeSH KB, untrained all-MiniLM-L6-v2"),
        f"Baseline, exact case-insensitive name/synonym match: R@1 {report['exact_match_baseline']['R@1']:.3f} "
        f"on the same {report['exact_match_baseline']['mentions']} in-KB mentions.",
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    typer.run(main)
