"""Gold ids of an older KB release: BC5CDR (2015) against MeSH 2024, with and without ``convert --id-map``.

``python benchmarks/id_map.py --pipeline training/pipeline_calibrated`` converts BC5CDR train and dev
twice — as they are, and with the stale supplementary-record ids rewritten through an id map — and
scores the same pipeline's gold-mention linking on both dev corpora (seen / unseen by the converted
train corpus of the same kind). The id map is made from ``../shared/data/bc5cdr/legacy_id_remap.tsv``
(its columns 1 and 3, rows with a candidate id: a curated exact-name heuristic of the data's
maintainers), written as ``OLD_ID<TAB>NEW_ID`` beside the report's work files; that is the file a
user gives ``convert --id-map``. The pipeline is not retrained: its alias table and training read the
corpus as it is, so this measures what relabelling the evaluation data changes.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import typer

from _common import ROOT, SHARED, invocation, machine, machine_line
from spacy_pel.corpora import corpus_ids, read_docbin
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.evaluation.linking import canonical_ids, mention_table, metrics
from spacy_pel.id_map import read_id_map
from spacy_pel.pipeline.linker import load_pipeline


def two_columns(curated: Path, out: Path) -> int:
    """``OLD_ID<TAB>NEW_ID`` lines from the curated table's columns 1 and 3 (rows with a new id); their number."""
    with open(curated, encoding="utf8", newline="") as f:
        rows = [(r["old_id"], r["candidate_new_ids"]) for r in csv.DictReader(f, delimiter="\t") if r["candidate_new_ids"].strip()]
    out.write_text("old_id\tnew_id\n" + "".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf8")
    return len(rows)


def main(pipeline: Path = typer.Option(..., help="A saved pipeline (the default workflow's training/pipeline_calibrated)"),
         dev: Path = typer.Option(SHARED / "bc5cdr" / "CDR_DevelopmentSet.PubTator.txt"),
         train: Path = typer.Option(SHARED / "bc5cdr" / "CDR_TrainingSet.PubTator.txt"),
         curated: Path = typer.Option(SHARED / "bc5cdr" / "legacy_id_remap.tsv"),
         work: Path = typer.Option(Path("/tmp/pel_id_map")),
         output: Path = typer.Option(ROOT / "benchmarks" / "id_map_bc5cdr", help="Report path without suffix")):
    work.mkdir(parents=True, exist_ok=True)
    map_file = work / "bc5cdr_legacy_ids.tsv"
    n_map = two_columns(curated, map_file)
    id_map = read_id_map(map_file)
    nlp, linker = load_pipeline(pipeline, None, None)
    results = {}
    for name, mapping in (("as annotated", None), ("--id-map", id_map)):
        spacy_files = {part: work / f"{part}_{bool(mapping)}.spacy" for part in ("train", "dev")}
        stats = {part: convert_corpora([src], spacy_files[part], id_map=mapping) for part, src in (("train", train), ("dev", dev))}
        train_ids = canonical_ids(linker, corpus_ids(read_docbin(nlp, spacy_files["train"])))
        rows, seconds = mention_table(linker, read_docbin(nlp, spacy_files["dev"]), progress=True)
        report = metrics(rows, seconds, linker.index.row, train_ids, linker.threshold)
        report["remapped"] = {part: sum(s["remapped"].values()) for part, s in stats.items()}
        results[name] = report
    out = {"machine": machine(), "invocation": invocation(), "pipeline": str(pipeline), "map_lines": n_map,
           "map_file": str(map_file), "results": results}
    output.with_suffix(".json").write_text(json.dumps(out, indent=2), encoding="utf8")
    output.with_suffix(".md").write_text(markdown(out), encoding="utf8")


def markdown(r: dict) -> str:
    lines = ["# KB version drift: BC5CDR (2015) gold ids against MeSH 2024, with and without `convert --id-map`", "",
             machine_line(r["machine"]) + ".", "", __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"Reproduce: `{r['invocation']}`. Pipeline: `{r['pipeline']}`; id map: {r['map_lines']} lines.", "",
             "| dev gold ids | mentions remapped (train / dev) | in KB | absent from KB | NIL | R@1 in KB | seen | unseen | R@1 all linkable (absent = miss) | accuracy, NIL included |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m in r["results"].items():
        c = m["counts"]
        lines.append(f"| {name} | {m['remapped']['train']} / {m['remapped']['dev']} | {c['in_kb']} | {c['absent']} | {c['nil']} | "
                     f"{m['recall_in_kb']['R@1']:.4f} | {m['recall_seen']['R@1']:.4f} | {m['recall_unseen']['R@1']:.4f} | "
                     f"{m['recall_all_linkable']['R@1']:.4f} | {m['accuracy_with_nil']:.4f} |")
    plain, mapped = r["results"]["as annotated"], r["results"]["--id-map"]
    hits = [round(m["recall_in_kb"]["R@1"] * m["counts"]["in_kb"]) for m in (plain, mapped)]
    moved = mapped["counts"]["in_kb"] - plain["counts"]["in_kb"]
    lines += ["", f"The map makes {moved} dev mentions linkable that MeSH 2024 could not hold under their 2015 ids; the "
              f"pipeline, trained on the corpus as annotated, already links about {hits[1] - hits[0]} of them to the mapped "
              "entity (the same linking, only the gold ids differ), so in-KB R@1 barely moves while R@1 over all "
              "linkable mentions and the accuracy with NIL rise by what the stale ids hid. The default workflow keeps "
              "the corpus as distributed (every earlier figure is on it); a user whose corpus predates their KB "
              "passes `--vars.convert_options \" --id-map FILE\"` (docs/your-own-data.md).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    typer.run(main)
