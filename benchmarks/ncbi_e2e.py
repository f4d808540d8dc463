"""Issue 29: NCBI disease end to end (raw text in), and what the span finder's propagation does there.

The pipeline is the one ``e2e`` assembles for the preset ``configs/datasets/ncbi_medic_both.args``
(``xargs -a configs/datasets/ncbi_medic_both.args python -m spacy project run e2e .``: the span model
trained on NCBI train from the NCBI-trained both-towers retriever, MEDIC encoded by its entity tower,
the alias table of NCBI train). Each row loads that pipeline with one span-finder setting changed
(``spacy.load(config=…)``) and links the raw text of every NCBI disease dev document, tokenized by the
pipeline as a user's text is (``e2e_pipeline.run``, scored by :func:`spacy_pel.evaluation.linking.e2e_metrics`:
strict: span + id; span: boundaries only).

NCBI disease dev is 100 documents and the span model's step and γ were chosen on them (its
``span_report.json``): there is no held-out part, so these are dev figures in the strictest sense.
The floor sweep is on the same documents: read it as what the setting does, not as a tuned figure.

    python benchmarks/ncbi_e2e.py        # writes benchmarks/ncbi_e2e.{json,md}; alone (it times docs/s)

Another span model (e.g. trained longer, ``--training.epochs 12 --output training/ncbi_medic_both/e2e12``):
assemble and calibrate its pipeline as ``e2e`` does, then ``--pipeline P --model DIR --output NAME``.
"""
from __future__ import annotations

import json

import spacy
import typer

from _common import HERE, ROOT, invocation, lscpu_model, machine, machine_line
from e2e_pipeline import run
from spacy_pel.corpora import read_docbin

PIPELINE = "training/ncbi_medic_both/pipeline_e2e_calibrated"
MODEL = "training/ncbi_medic_both/e2e"
KEY = "components.pel_linker.mentions."
SETTINGS = {
    "no propagation": {KEY + "propagate": False},
    "propagation (as assembled)": {},
    **{f"propagation, floor {f}": {KEY + "propagate_floor": f} for f in (0.01, 0.05, 0.1, 0.2)},
}


def markdown(r: dict) -> str:
    model = r["span_model"]
    lines = [f"# Issue 29: NCBI disease dev end to end (raw text in), span-finder propagation ({r['span_model']['path']})", "",
             machine_line(r["machine"]) + "; alone.", "",
             f"Reproduce: `xargs -a configs/datasets/ncbi_medic_both.args python -m spacy project run e2e .{r.get('e2e_vars', '')}` "
             f"(train_e2e {model['train_minutes']} min, {model['steps']} steps, span model `{model['path']}`, "
             f"pipeline `{r['pipeline']}`), then `{r.get('command', 'python benchmarks/ncbi_e2e.py' + r.get('arguments', ''))}`. "
             f"The span model alone on the same 100 documents (its report, γ {model['threshold']}): span P "
             f"{model['span']['p']:.3f} R {model['span']['r']:.3f} F1 {model['span']['f']:.3f}; best step {model['best_step']} "
             f"of {model['steps']}.", "",
             "| span finder | strict P | strict R | strict F1 | span P | span R | span F1 | predicted | docs/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, x in r["results"].items():
        s, sp = x["strict"], x["span"]
        lines.append(f"| {name} | {s['p']:.3f} | {s['r']:.3f} | **{s['f']:.3f}** | {sp['p']:.3f} | {sp['r']:.3f} | "
                     f"{sp['f']:.3f} | {x['predicted']} | {x['docs_per_s']:.1f} |")
    lines += ["", f"Gold: {next(iter(r['results'].values()))['gold']} mentions in 100 documents. Issue 29's target: strict F1 ≥ 0.80."]
    if r.get("notes"):
        lines += ["", r["notes"]]
    return "\n".join(lines) + "\n"


def main(pipeline: str = typer.Option(PIPELINE), model: str = typer.Option(MODEL, help="the span model's training folder"),
         dev: str = typer.Option("corpus/ncbi_dev.spacy"), output: str = typer.Option("ncbi_e2e", help="report name in benchmarks/"),
         e2e_vars: str = typer.Option("", help="vars the span model was trained with beyond the preset's, e.g. ' --vars.e2e_max_steps 1776'"),
         notes: str = typer.Option("")):
    log = json.loads((ROOT / model / "train_log.json").read_text())
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "pipeline": pipeline, "notes": notes, "command": invocation(), "e2e_vars": e2e_vars,
              "span_model": {"path": model, "steps": log["step"], "best_step": log.get("best_step"),
                             "train_minutes": round(log["train_seconds"] / 60, 1),
                             "threshold": log["span_report"]["threshold"], "span": log["span_report"]["dev"]["span"]},
              "results": {}}
    gold = read_docbin(spacy.blank("en"), ROOT / dev)
    for name, overrides in SETTINGS.items():
        report["results"][name] = run(ROOT / pipeline, gold, overrides, tokenize=True)  # the text as a user gives it
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
