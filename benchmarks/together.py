"""Issue 29, item 4: BC5CDR + NCBI disease trained together against one KB (MeSH), both dev sets measured.

NCBI disease's gold ids are MeSH descriptor / supplementary ids (and OMIM ids, which MeSH does not hold:
those mentions are out of the KB, left out of training and of in-KB R@1 alike). The chain, each step skipped
when its output exists (a cut run resumes), timed, written to benchmarks/together.{json,md}:

1. ``convert``  BC5CDR train + NCBI train → corpus/bc5cdr_ncbi_train.spacy (one corpus, as the workflow's
                ``train_corpora`` var does it);
2. the both-towers chain of ``benchmarks/both_towers.py`` with run ``together`` on that corpus: train
   (configs/train_both.cfg, the recipe of both_towers_lr025: one epoch, entity tower at 0.25 × lr), all of
   MeSH encoded by the final entity tower, its name rows, the alias table of both corpora, the pipeline as
   ``all`` assembles it;
3. ``eval``     BC5CDR dev and NCBI dev gold mentions vs all of MeSH, for the BC5CDR-only pipeline of the same
                recipe (training/pipeline_lr025) and the together one.

    python benchmarks/together.py            # every step not yet done, then the report
"""
from __future__ import annotations

import json
from typing import List

import typer

from _common import HERE, ROOT, SHARED, lscpu_model, machine, machine_line
from accuracy import dev_section
from both_towers import chain
from encoder_adapt import PY, run_step

TRAIN = "corpus/bc5cdr_ncbi_train.spacy"
OVERRIDES = "--training.epochs 1 --training.entity_lr_scale 0.25"
BASELINE = "training/pipeline_lr025"  # benchmarks/both_towers_lr025.md: the same recipe on BC5CDR train only
DEVS = {"BC5CDR dev": ROOT / "corpus" / "bc5cdr_dev.spacy", "NCBI dev": ROOT / "corpus" / "ncbi_dev.spacy"}


def steps() -> dict:
    convert = (TRAIN, f"{PY} -m spacy_pel.convert {SHARED}/bc5cdr/CDR_TrainingSet.PubTator.txt "
                      f"{SHARED}/ncbi-disease/NCBItrainset_corpus.txt {TRAIN} --skip-bad-lines")
    dev = ("corpus/ncbi_dev.spacy", f"{PY} -m spacy_pel.convert {SHARED}/ncbi-disease/NCBIdevelopset_corpus.txt "
                                    "corpus/ncbi_dev.spacy --skip-bad-lines")
    return {"convert": convert, "convert_dev": dev, **chain("together", TRAIN)}


def measure(pipeline: str) -> dict:
    out = {}
    for name, dev in DEVS.items():
        m = dev_section(ROOT / pipeline, None, dev, ROOT / TRAIN)
        out[name] = {"R@1": m["recall_in_kb"]["R@1"], "R@64": m["recall_in_kb"]["R@64"], "unseen": m["recall_unseen"]["R@1"],
                     "in_kb": m["counts"].get("in_kb"), "mentions_per_s": m["mentions_per_s"]}
    return out


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = ["# Issue 29, item 4: BC5CDR + NCBI disease trained together against MeSH", "",
             machine_line(m) + "; every step ran alone.", "",
             "Reproduce: `python benchmarks/together.py` (the chain is in its docstring). Both pipelines: configs/train_both.cfg "
             f"(`{OVERRIDES}`), all of MeSH and its name rows encoded by their own final entity tower, the rules of "
             "configs/linker_rules.cfg, context 64. Gold mentions; in-KB R@1 (NCBI's OMIM-only mentions are not in MeSH); "
             "unseen = gold entity absent from the BC5CDR + NCBI training ids.", "",
             "| pipeline | " + " | ".join(f"{d} R@1 | {d} unseen | {d} R@64" for d in DEVS) + " |",
             "|---|" + "---:|" * (3 * len(DEVS))]
    for label, key in (("BC5CDR train only (training/pipeline_lr025)", "baseline"), ("BC5CDR + NCBI train (this run)", "together")):
        if key in r:
            lines.append(f"| {label} | " + " | ".join(f"{r[key][d]['R@1']:.4f} | {r[key][d]['unseen']:.4f} | {r[key][d]['R@64']:.4f}"
                                                        for d in DEVS) + " |")
    if "baseline" in r and "together" in r:
        delta = {d: r["together"][d]["R@1"] - r["baseline"][d]["R@1"] for d in DEVS}
        falls = [d for d, x in delta.items() if x < 0]
        lines += ["", "Change in R@1: " + ", ".join(f"{d} {x * 100:+.2f} pt" for d, x in delta.items()) + ". Verdict: " +
                  (f"{' and '.join(falls)} fell, so it is not a preset." if falls else "neither dev set fell.")]
    if r.get("notes"):
        lines += ["", r["notes"]]
    lines += ["", "| step | minutes | command |", "|---|---:|---|"]
    lines += [f"| {k} | {v['minutes']} | `{v['command']}` |" for k, v in r.get("steps", {}).items()]
    return "\n".join(lines) + "\n"


def main(what: List[str] = typer.Option(list(steps()) + ["eval", "report"], "--steps", help="What to do"),
         notes: str = typer.Option("")):
    out = HERE / "together.json"
    report = json.loads(out.read_text()) if out.exists() else {}
    report["machine"] = {**machine(), "lscpu_model": lscpu_model()}
    if notes:
        report["notes"] = notes

    def save():
        out.write_text(json.dumps(report, indent=2), encoding="utf8")
        out.with_suffix(".md").write_text(markdown(report), encoding="utf8")

    chain_steps = steps()
    for name in chain_steps:
        if name in what:
            run_step(name, report, steps=chain_steps, train_overrides=OVERRIDES)
            save()
    if "eval" in what:
        report["baseline"] = measure(BASELINE)
        report["together"] = measure("training/pipeline_together")
    log = ROOT / "training" / "retriever_together" / "train_log.json"
    if log.exists():
        t = json.loads(log.read_text())
        report["train_log"] = {k: t.get(k) for k in ("step", "train_seconds", "best_step", "history")}
    save()


if __name__ == "__main__":
    typer.run(main)
