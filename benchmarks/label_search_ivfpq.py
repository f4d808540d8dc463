"""The label search (``label_types`` rule, ``search_share``) over an approximate KB: the pipeline's own MeSH
vectors put in an ``ivfpq`` index (IVF-PQ codes, the top 100 rescored exactly from the saved vectors: what
``build_kb --index ivfpq`` makes for KBs of millions of entities), linked with the whole KB searched and with
``Disease`` mentions searched exactly among the disease rows.

One process: the pipeline is loaded once, its KB swapped for the ivfpq one (nothing re-encoded), and BC5CDR
dev gold mentions linked after a 20-document warm-up, the two settings alternating ``--rounds`` times
(the flat KB's figures for comparison are in ``benchmarks/label_search.md``).

    python benchmarks/label_search_ivfpq.py --pipeline training/pipeline_calibrated
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import spacy
import typer

from _common import HERE, ROOT, invocation, lscpu_model, machine, machine_line, median_cell, report_footer
from spacy_pel.corpora import gold_ids, gold_spans, read_docbin
from spacy_pel.pipeline.linker import find_linker
from spacy_pel.retrieval.index import EntityIndex
from speed import with_gold_ents

SETTINGS = {"whole KB (ivfpq)": 0.0, "Disease among its types (exact), Chemical whole KB (ivfpq)": 0.5}
WARMUP_DOCS = 20
app = typer.Typer(add_completion=False)


def r_at_1(linker, gold_docs, linked) -> float:
    lookup, hits = linker.index.lookup, []
    for gold_doc, doc in zip(gold_docs, linked):
        for g, p in zip(gold_spans(gold_doc), doc.ents):
            ids = gold_ids(g.kb_id_)
            if any(i in lookup for i in ids):
                hits.append(p.kb_id_ in ids)
    return sum(hits) / len(hits)


@app.command()
def main(pipeline: Path = typer.Option(..., help="the calibrated `all` pipeline"),
         dev: Path = typer.Option(ROOT / "corpus" / "bc5cdr_dev.spacy"), rounds: int = typer.Option(3),
         output: Path = typer.Option(HERE / "label_search_ivfpq", help="report path without suffix"),
         notes: str = typer.Option("")):
    nlp = spacy.load(pipeline)
    _, linker = find_linker(nlp)
    linker.ensure_loaded()
    flat = linker.index
    t0 = time.perf_counter()
    ivfpq = EntityIndex(flat.entities, flat.embeddings, metric=flat.metric, fingerprint=flat.fingerprint,
                        encoder_source=flat.encoder_source, kind="ivfpq")
    build_seconds = time.perf_counter() - t0
    linker.set_resources(linker.encoder, ivfpq)
    rule = next(r for r in linker.rules.values() if hasattr(r, "search_share"))
    docs = read_docbin(nlp, dev)
    list(nlp.pipe(with_gold_ents(docs[:WARMUP_DOCS])))
    timed = docs[WARMUP_DOCS:]
    results = {name: {"search_share": share, "seconds": []} for name, share in SETTINGS.items()}
    for _ in range(rounds):
        for name, share in SETTINGS.items():
            rule.search_share = share
            rule.setup(linker.encoder, ivfpq)
            fresh = with_gold_ents(timed)
            t0 = time.perf_counter()
            linked = list(nlp.pipe(fresh))
            results[name]["seconds"].append(round(time.perf_counter() - t0, 2))
            results[name]["R@1"] = round(r_at_1(linker, timed, linked), 4)
            results[name]["mentions"] = sum(len(d.ents) for d in linked)
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "notes": notes,
              "entities": len(ivfpq), "ivfpq_build_seconds": round(build_seconds, 1), "docs": len(timed), "settings": results}
    output.with_suffix(".json").write_text(json.dumps(report, indent=2), encoding="utf8")
    output.with_suffix(".md").write_text(markdown(report), encoding="utf8")


def markdown(r: dict) -> str:
    lines = ["# The label search over an approximate (ivfpq) KB", "", machine_line(r["machine"]) + ".", "",
             __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"{r['entities']:,} entities (ivfpq built in {r['ivfpq_build_seconds']} s from the saved vectors); {r['docs']} documents.", "",
             "| setting | R@1 (in-KB gold mentions) | mentions/s (median; passes) |", "|---|---:|---|"]
    for name, s in r["settings"].items():
        rates = [s["mentions"] / x for x in s["seconds"]]
        lines.append(f"| {name} (`search_share {s['search_share']}`) | {s['R@1']:.4f} | {median_cell(rates)} |")
    return "\n".join(lines + report_footer(r))


if __name__ == "__main__":
    app()
