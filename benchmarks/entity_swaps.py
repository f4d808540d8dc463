"""Entity swaps (``[augment] entity_swaps``, :mod:`spacy_pel.training.entity_swaps`): the retriever trained
with copies of its training mentions whose words name another KB entity of the gold one's types, against the
same training without them; the pipeline (rules and name rows as assembled) and the retriever alone
(``evaluate --kb KB --encoder ENCODER``: no rules, no name rows), seen / unseen entities.

Each run is one training (its command in the run's record) followed by::

    python -m spacy assemble LINKER_CFG PIPELINE --paths.kb KB --paths.encoder RETRIEVER/best --paths.aliases ALIASES --paths.names NAMES ...
    python -m spacy_pel evaluate DEV --pipeline PIPELINE --train TRAIN --output DEV_JSON
    python -m spacy_pel evaluate DEV --kb KB --encoder RETRIEVER/best --train TRAIN --output ALONE_JSON

(a trained entity tower re-encodes the KB and its name rows first: ``build_kb --reuse``, ``build-names``).
``add`` records a run from those files into ``benchmarks/entity_swaps/NAME.json``; ``report`` writes
``entity_swaps.md`` / ``.json`` from every record.

    python benchmarks/entity_swaps.py add --name bc5cdr_swaps05 --corpus BC5CDR --swaps 0.5 --dev DEV_JSON --alone ALONE_JSON --train-log RETRIEVER/train_log.json --command "…"
    python benchmarks/entity_swaps.py report
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import typer

from _common import HERE, lscpu_model, machine, machine_line

RUNS = HERE / "entity_swaps"
app = typer.Typer(add_completion=False)


def figures(report: dict) -> dict:
    """R@1 / unseen / seen / R@64 of an ``evaluate`` JSON report."""
    return {"R@1": report["recall_in_kb"]["R@1"], "unseen": report["recall_unseen"]["R@1"],
            "seen": report["recall_seen"]["R@1"], "R@64": report["recall_in_kb"]["R@64"], "mentions": report["counts"]["in_kb"]}


@app.command()
def add(name: str = typer.Option(...), corpus: str = typer.Option(...), swaps: float = typer.Option(...),
        dev: Path = typer.Option(..., help="evaluate JSON of the pipeline"),
        alone: Path = typer.Option(..., help="evaluate JSON of the retriever alone (--kb --encoder)"),
        train_log: Path = typer.Option(..., help="the retriever's train_log.json"),
        command: str = typer.Option(..., help="the training command"), notes: str = typer.Option("")):
    log = json.loads(train_log.read_text())
    record = {"name": name, "corpus": corpus, "swaps": swaps, "steps": log["step"], "best_step": log["best_step"],
              "train_minutes": round(log["train_seconds"] / 60, 1), "command": command, "notes": notes,
              "machine": {**machine(), "lscpu_model": lscpu_model()},
              "pipeline": figures(json.loads(dev.read_text())), "alone": figures(json.loads(alone.read_text()))}
    RUNS.mkdir(exist_ok=True)
    (RUNS / f"{name}.json").write_text(json.dumps(record, indent=2), encoding="utf8")


def markdown(records: List[dict], notes: str) -> str:
    lines = ["# Entity swaps: training mentions renamed as other KB entities, in their own context", "",
             machine_line(records[0]["machine"]) + ".", "", __doc__.split("\n\n")[0].replace("\n", " "), "",
             "| corpus | run | swaps | steps | train min | pipeline R@1 | unseen | seen | retriever alone R@1 | unseen | seen | R@64 |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in records:
        p, a = r["pipeline"], r["alone"]
        lines.append(f"| {r['corpus']} | {r['name']} | {r['swaps']} | {r['steps']} | {r['train_minutes']} | **{p['R@1']:.4f}** | "
                     f"**{p['unseen']:.4f}** | {p['seen']:.4f} | **{a['R@1']:.4f}** | **{a['unseen']:.4f}** | {a['seen']:.4f} | {a['R@64']:.4f} |")
    lines += ["", "Training commands:", ""] + [f"- {r['name']}: `{r['command']}`" + (f" — {r['notes']}" if r["notes"] else "")
                                                 for r in records]
    return "\n".join(lines + ["", notes, ""])


@app.command()
def report(notes: str = typer.Option("", help="the verdict, written under the table")):
    records = sorted((json.loads(p.read_text()) for p in RUNS.glob("*.json")), key=lambda r: (r["corpus"], r["swaps"], r["name"]))
    out = {"runs": records, "notes": notes}
    (HERE / "entity_swaps.json").write_text(json.dumps(out, indent=2), encoding="utf8")
    (HERE / "entity_swaps.md").write_text(markdown(records, notes), encoding="utf8")


if __name__ == "__main__":
    app()
