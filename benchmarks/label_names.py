"""Span labels named as other NERs and corpora name them: BC5CDR dev gold mentions linked by the pipeline
with their labels as annotated (``Chemical``, ``Disease``), as scispaCy's BC5CDR NER names them
(``CHEMICAL``, ``DISEASE``), as BioRED does (``ChemicalEntity``, ``DiseaseOrPhenotypicFeature``) and as
scispaCy's general models do (every span ``ENTITY``, a label no map names).
The pipeline's label → KB types maps (the ``label_types`` rule's, the NIL classifier's) are keyed by
BC5CDR's names; :mod:`spacy_pel.pipeline.label_names` lets a label find its key under another name.

Each ``run`` links all 500 dev documents under each naming in one process and adds its rows to the
report; ``--label`` names the code (run it once with ``PYTHONPATH`` at a worktree of the code before, once
with this code).

    python benchmarks/label_names.py --pipeline training/pipeline_calibrated --label "this code" --append
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import spacy
import typer
from spacy.tokens import Span

from _common import HERE, ROOT, invocation, lscpu_model, machine, machine_line, report_footer
from spacy_pel.corpora import NIL, gold_ids, gold_spans, read_docbin
from spacy_pel.pipeline.linker import find_linker
from speed import bare_doc

NAMINGS = {"as annotated (BC5CDR)": {}, "scispaCy's NER": {"Chemical": "CHEMICAL", "Disease": "DISEASE"},
           "BioRED": {"Chemical": "ChemicalEntity", "Disease": "DiseaseOrPhenotypicFeature"},
           "scispaCy's general NER (ENTITY)": {"Chemical": "ENTITY", "Disease": "ENTITY"}}
app = typer.Typer(add_completion=False)


def scores(linker, gold_docs, linked) -> dict:
    """In-KB R@1, NIL precision / recall / F1 and accuracy over every mention (NIL included)."""
    hits, right, tp, fp, fn = [], [], 0, 0, 0
    for gold_doc, doc in zip(gold_docs, linked):
        for g, p in zip(gold_spans(gold_doc), doc.ents):
            ids = gold_ids(g.kb_id_)
            is_nil, said_nil = ids == [NIL], p.kb_id_ == NIL
            tp, fp, fn = tp + (is_nil and said_nil), fp + (said_nil and not is_nil), fn + (is_nil and not said_nil)
            if any(i in linker.index.lookup for i in ids):
                hits.append(p.kb_id_ in ids)
            right.append(said_nil if is_nil else p.kb_id_ in ids)
    precision, recall = tp / max(tp + fp, 1), tp / max(tp + fn, 1)
    return {"R@1": round(sum(hits) / len(hits), 4), "in_kb": len(hits), "accuracy_with_nil": round(sum(right) / len(right), 4),
            "nil_predicted": tp + fp, "nil_p": round(precision, 3), "nil_r": round(recall, 3),
            "nil_f": round(2 * precision * recall / max(precision + recall, 1e-9), 3)}


@app.command()
def main(pipeline: Path = typer.Option(..., help="a calibrated pipeline (training/pipeline_calibrated)"),
         dev: Path = typer.Option(ROOT / "corpus" / "bc5cdr_dev.spacy"), label: str = typer.Option("", help="the code measured"),
         append: bool = typer.Option(False), output: Path = typer.Option(HERE / "label_names", help="report path without suffix"),
         notes: str = typer.Option(""),
         naming: List[str] = typer.Option(list(NAMINGS), help="the namings measured (repeat the option)")):
    old = json.loads(output.with_suffix(".json").read_text()) if append and output.with_suffix(".json").exists() else {}
    nlp = spacy.load(pipeline)
    _, linker = find_linker(nlp)
    docs = read_docbin(nlp, dev)
    rows = old.get("rows", [])
    unknown = sorted(set(naming) - set(NAMINGS))
    if unknown:
        raise typer.BadParameter(f"unknown naming(s) {unknown}; known: {list(NAMINGS)}")
    for name in naming:
        renamed, given = NAMINGS[name], []
        for doc in docs:
            copy = bare_doc(doc)
            copy.ents = [Span(copy, s.start, s.end, label=renamed.get(s.label_, s.label_)) for s in gold_spans(doc)]
            given.append(copy)
        rows.append({"code": label, "labels": name, **scores(linker, docs, list(nlp.pipe(given)))})
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "pipeline": str(pipeline),
              "notes": notes or old.get("notes", ""), "rows": rows}
    output.with_suffix(".json").write_text(json.dumps(report, indent=2), encoding="utf8")
    output.with_suffix(".md").write_text(markdown(report), encoding="utf8")


def markdown(r: dict) -> str:
    lines = ["# Span labels under other names (scispaCy's NER, BioRED) against a map keyed by BC5CDR's", "",
             machine_line(r["machine"]) + ".", "", __doc__.split("\n\n")[0].replace("\n", " "), "",
             f"Pipeline `{r['pipeline']}`, BC5CDR dev gold mentions.", "",
             "| code | labels | in-KB R@1 | accuracy with NIL | NIL decisions | NIL P / R / F1 |", "|---|---|---:|---:|---:|---|"]
    for row in r["rows"]:
        lines.append(f"| {row['code']} | {row['labels']} | **{row['R@1']:.4f}** | {row['accuracy_with_nil']:.4f} | "
                     f"{row['nil_predicted']} | {row['nil_p']:.3f} / {row['nil_r']:.3f} / {row['nil_f']:.3f} |")
    return "\n".join(lines + report_footer(r))


if __name__ == "__main__":
    app()
