"""The alias table's ``name_ties``: among the entities of a KB name, all by score or those with the fewest names.

``python benchmarks/name_ties.py --case LABEL PIPELINE CORPUS TRAIN [KB] …`` links each corpus's gold
mentions twice with the same pipeline (``components.pel_linker.rules.aliases.name_ties`` = ``score`` and
``fewest_names``, set at load) and reports in-KB R@1, unseen R@1 (gold entity absent from TRAIN's ids),
the mentions whose top entity changed (gained, lost) and the exact-name ties (mentions whose text is a
name of two or more entities that the annotated text does not know) with each setting's R@1 on them.
``KB`` (optional) links against another KB folder, its name rows built with the pipeline's encoder as
``benchmarks/accuracy.py`` does (the BC5CDR-trained pipeline against MEDIC: NCBI disease as transfer,
its training set unseen by that pipeline).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from _common import invocation, machine, machine_line
from accuracy import load
from spacy_pel.corpora import corpus_ids, gold_spans, read_docbin
from spacy_pel.evaluation.linking import canonical_ids, mention_table, metrics
from spacy_pel.kb import normalize

SETTINGS = ("score", "fewest_names")
KEY = "components.pel_linker.rules.aliases.name_ties"


def exact_ties(linker, spans) -> List[int]:
    """Indices of the mentions whose normalised text is a KB name of ≥ 2 entities and not a surface form
    of the pipeline's aliases (the cases ``name_ties`` decides)."""
    table = linker.rules["aliases"].table
    out = []
    for n, span in enumerate(spans):
        key = normalize(span.text)
        found = table.names.get(key)
        if key not in table.seen and found and len(found) > 1:
            out.append(n)
    return out


def case(label: str, pipeline: Path, corpus: Path, train: Path, kb: Optional[Path], work: Path) -> dict:
    out = {"case": label, "pipeline": str(pipeline), "corpus": str(corpus), "train": str(train), "kb": str(kb or "")}
    tops, train_ids = {}, None
    for setting in SETTINGS:
        nlp, linker = load(pipeline, kb, work, {KEY: setting})
        linker.ensure_loaded()
        docs = read_docbin(nlp, corpus)
        spans = [s for d in docs for s in gold_spans(d)]
        if train_ids is None:  # one KB for both settings: TRAIN's ids are read and resolved once
            train_ids = canonical_ids(linker, corpus_ids(read_docbin(nlp, train)))
        rows, seconds = mention_table(linker, docs, k=None)
        m = metrics(rows, seconds, linker.index.row, train_ids, None)
        ties = exact_ties(linker, spans)
        in_kb = [n for n in ties if any(g in linker.index.row for g in rows[n][0])]
        right = [n for n in in_kb if rows[n][1] and rows[n][1][0] in rows[n][0]]
        out[setting] = {"R@1": m["recall_in_kb"]["R@1"], "unseen R@1": m.get("recall_unseen", {}).get("R@1"),
                        "in_kb": m["counts"]["in_kb"], "ties": len(in_kb), "ties right": len(right)}
        tops[setting] = [(r[0], r[1][0] if r[1] else None, s.text) for r, s in zip(rows, spans)]
    changed = [(a, b) for a, b in zip(tops["score"], tops["fewest_names"]) if a[1] != b[1]]
    out["gained"] = [b[2] for a, b in changed if b[1] in b[0]]
    out["lost"] = [a[2] for a, b in changed if a[1] in a[0]]
    return out


def markdown(report: dict) -> str:
    lines = [f"# The alias table's `name_ties`: {' / '.join(SETTINGS)}", "", f"{machine_line(report['machine'])}.", "",
             f"Reproduce: `{report['command']}`. Gold mentions; in-KB R@1 of the pipeline as saved, `name_ties` set at load "
             "(everything else unchanged). Ties: mentions whose normalised text is a KB name of two or more entities "
             "and not a surface form of the pipeline's aliases (what `name_ties` decides).", "",
             "| case | in-KB mentions | R@1 score → fewest_names | unseen R@1 | ties: right (score → fewest_names) | gained | lost |",
             "|---|---:|---|---|---:|---:|---:|"]
    for c in report["cases"]:
        a, b = c["score"], c["fewest_names"]
        unseen = f"{a['unseen R@1']} → {b['unseen R@1']}" if a["unseen R@1"] is not None else "–"
        lines.append(f"| {c['case']} | {a['in_kb']} | {a['R@1']:.4f} → **{b['R@1']:.4f}** | {unseen} | "
                     f"{a['ties right']} → {b['ties right']} of {a['ties']} | {len(c['gained'])} | {len(c['lost'])} |")
    lines += ["", "Mentions gained / lost (text):", ""]
    for c in report["cases"]:
        lines.append(f"- {c['case']}: gained {sorted(set(c['gained']))}; lost {sorted(set(c['lost']))}")
    if report.get("notes"):
        lines += ["", report["notes"]]
    return "\n".join(lines) + "\n"


def main(case_: List[str] = typer.Option(..., "--case", help="LABEL,PIPELINE,CORPUS,TRAIN[,KB] (comma-separated)"),
         work: Path = typer.Option(Path("training/bench/name_ties"), help="folder for name rows of another KB"),
         output: Path = typer.Option(Path("benchmarks/name_ties"), help="report path without suffix"),
         notes: str = typer.Option("", help="a paragraph added to the report")):
    """Compare name_ties settings on gold mentions and write OUTPUT.md / OUTPUT.json."""
    work.mkdir(parents=True, exist_ok=True)
    cases = []
    for spec in case_:
        parts = spec.split(",")
        if len(parts) not in (4, 5):
            raise typer.BadParameter(f"--case {spec!r}: expected LABEL,PIPELINE,CORPUS,TRAIN[,KB]")
        label, pipeline, corpus, train = parts[:4]
        kb = Path(parts[4]) if len(parts) == 5 else None
        cases.append(case(label, Path(pipeline), Path(corpus), Path(train), kb, work))
    report = {"machine": machine(), "command": invocation(),
              "cases": cases, "notes": notes}
    output.with_suffix(".json").write_text(json.dumps(report, indent=1), encoding="utf8")
    output.with_suffix(".md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
