"""Issue 29, item 4 again, with today's default recipe: BC5CDR + NCBI disease train together against MeSH, both dev sets.

``benchmarks/together.md`` measured it with an older both-towers recipe (BC5CDR −0.2 pt, NCBI +8 pt: no preset). The
default `all` now trains the mention tower only (3 epochs, CE with half hard negatives, context 32), so MeSH and its name
rows are those of any default run: a workspace where the default `all` ran (``--workspace``) lends its KB folders, and
only the retriever is trained again, on both training corpora (``convert --skip-bad-lines`` of both into one file, as
the workflow's ``train_corpora`` var does; NCBI disease has malformed lines, which its preset skips too), then the
alias table of both, the pipeline as `all` assembles it, calibrated on BC5CDR dev
as `all` does, evaluated on BC5CDR dev and NCBI disease dev against MeSH (NCBI's OMIM-only mentions are out of MeSH).
The workspace's own pipeline (BC5CDR train only) is measured on both dev sets beside it. Each step whose output
exists is skipped (a cut run resumes); its minutes go to the report.

    python benchmarks/together_default.py --workspace /path/to/default/clone --work /tmp/together
"""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import typer

from _common import (
    HERE,
    SHARED,
    evaluate_figures,
    invocation,
    lscpu_model,
    machine,
    machine_line,
    report_footer,
    run_timed,
)

PY = shlex.quote(sys.executable)
app = typer.Typer(add_completion=False)
TOGETHER_FIGURES = ("mentions", "r1", "unseen_r1", "r64")


@app.command()
def main(workspace: Path = typer.Option(..., help="a clone where the default `all` ran (kbs/mesh, kbs/mesh_names, its pipeline)"),
         work: Path = typer.Option(..., help="where this run's corpus, retriever and pipeline go"),
         output: str = typer.Option("together_default"), notes: str = typer.Option("")):
    ws, work = workspace.resolve(), work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    train, ncbi_dev, bc_dev = work / "together_train.spacy", work / "ncbi_dev.spacy", ws / "corpus" / "bc5cdr_dev.spacy"
    kb, names = ws / "kbs" / "mesh_final", ws / "kbs" / "mesh_names"
    steps = {
        "convert": (train, f"{PY} -m spacy_pel.convert {SHARED}/bc5cdr/CDR_TrainingSet.PubTator.txt "
                           f"{SHARED}/ncbi-disease/NCBItrainset_corpus.txt {train} --skip-bad-lines"),
        "convert_dev": (ncbi_dev, f"{PY} -m spacy_pel.convert {SHARED}/ncbi-disease/NCBIdevelopset_corpus.txt {ncbi_dev} --skip-bad-lines"),
        "train": (work / "retriever" / "best", f"{PY} -m spacy_pel.train configs/train_pb_random.cfg --output {work}/retriever "
                  f"--encoder.base all-MiniLM-L6-v2 --encoder.mention_max_length 32 --paths.kb {ws}/kbs/mesh --training.epochs 3 "
                  f"--loss.name ce_cosine --negatives.hard_fraction 0.5 --training.lr 0.00005 --paths.train {train} --paths.dev {bc_dev}"),
        "aliases": (work / "aliases.json", f"{PY} -m spacy_pel.aliases {train} --output {work}/aliases.json"),
        "pipeline": (work / "pipeline", f"{PY} -m spacy assemble configs/linker_rules.cfg {work}/pipeline --paths.kb {kb} "
                     f"--paths.encoder {work}/retriever/best --paths.aliases {work}/aliases.json --paths.names {names} "
                     "--components.pel_linker.context_window 32"),
        "calibrate": (work / "pipeline_calibrated", f"{PY} -m spacy_pel.calibrate {work}/pipeline {bc_dev} --output "
                      f"{work}/pipeline_calibrated --nil classifier_pairs --max-r1-loss 0.01"),
    }
    minutes = {name: (None if out.exists() else run_timed(command)) for name, (out, command) in steps.items()}
    rows = []
    for title, pipeline, trained_on in (("BC5CDR train only (the workspace's default `all`)", ws / "training" / "pipeline_calibrated",
                                         ws / "corpus" / "bc5cdr_train.spacy"),
                                        ("BC5CDR + NCBI disease train", work / "pipeline_calibrated", train)):
        tag = "own" if pipeline.parent.parent == ws else "together"
        rows.append({"pipeline": title, "path": str(pipeline),
                     "bc5cdr": evaluate_figures(bc_dev, work / f"eval_{tag}_bc5cdr.json", TOGETHER_FIGURES, pipeline=pipeline, train=trained_on, reuse=True),
                     "ncbi": evaluate_figures(ncbi_dev, work / f"eval_{tag}_ncbi.json", TOGETHER_FIGURES, pipeline=pipeline, train=trained_on, reuse=True)})
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "workspace": str(ws), "minutes": minutes,
              "commands": {k: c for k, (_, c) in steps.items()}, "rows": rows, "command": invocation(), "notes": notes}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


def markdown(r: dict) -> str:
    lines = ["# Issue 29, item 4 with the default recipe: BC5CDR + NCBI disease trained together against MeSH", "",
             machine_line(r["machine"]) + "; alone.", "",
             "Module doc of `benchmarks/together_default.py`. Gold mentions, in-KB R@1; unseen: gold entity absent from the "
             "pipeline's training corpus.", "",
             "| pipeline | BC5CDR dev R@1 | unseen | R@64 | NCBI dev vs MeSH R@1 | unseen | R@64 |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in r["rows"]:
        b, n = row["bc5cdr"], row["ncbi"]
        lines.append(f"| {row['pipeline']} | **{b['r1']:.4f}** | {b['unseen_r1']:.4f} | {b['r64']:.4f} | **{n['r1']:.4f}** | "
                     f"{n['unseen_r1']:.4f} | {n['r64']:.4f} |")
    lines += ["", "| step | minutes | command |", "|---|---:|---|"]
    for name, command in r["commands"].items():
        m = r["minutes"][name]
        lines.append(f"| {name} | {'reused' if m is None else m} | `{command.replace(sys.executable, 'python')}` |")
    return "\n".join(lines + report_footer(r))


if __name__ == "__main__":
    app()
