"""Issue 28, item 1's acceptance row: the KB-adapted encoder alone (no mention training) vs base MiniLM.

1. ``adapt``  ``python -m spacy_pel adapt MESH --format mesh -o training/adapted --max-minutes 15``
              (configs/adapt.cfg: a MeSH synonym as a marked mention vs its entity's KB row, both towers,
              shared negatives half hard; the workflow's ``adapt_minutes`` budget); skipped when it exists;
              then the same run continued to ``--long-minutes`` (its resumable state copied to
              ``training/adapted_long.work`` and resumed there: the same 1,000-step schedule, further along);
   and (session 35) the same budget with silver mentions: ``silver`` finds the names of exactly one
              chemical or disease MeSH entity in the raw text of BC5CDR train and NCBI disease train (their
              annotations unused) and writes them as linked mentions in context, half of them renamed by
              another synonym of their entity; ``adapt`` replays them as half of every batch
              (``--paths.train corpus/silver_mesh.spacy --synonyms.replay 0.5``, mentions in 64 pieces);
2. ``eval``   base MiniLM and the adapted encoder with :mod:`subset_eval` (BC5CDR dev gold mentions vs the
              dev gold entities + 50,000 random MeSH records, encoded by each encoder's own entity tower),
              in two inputs: the mention's text alone (``[CLS] [M_s] mention [M_e] [SEP]``, what ``adapt``
              trains on: how an encoder adapted from a KB alone, with no annotated text, is used) and the
              mention in 64 word pieces of context (the retriever's input after mention training).

    python benchmarks/adapt_alone.py           # writes benchmarks/adapt_alone.{json,md}
"""
from __future__ import annotations

import json
import shutil

import spacy
import typer

from _common import HERE, ROOT, SHARED, lscpu_model, machine, machine_line, run_timed
from spacy_pel.corpora import gold_spans, read_docbin
from subset_eval import SAMPLE, SubsetEval

BASE = "base MiniLM (no training)"
ADAPTED = "adapted on MeSH (no mention training)"
LONG = "adapted on MeSH, longer (no mention training)"
SILVER = "adapted on MeSH + silver mentions from raw text (no annotation)"
SILVER_BC5 = "adapted on MeSH + silver mentions from BC5CDR train's text only (no annotation)"
ENCODERS = {BASE: "all-MiniLM-L6-v2", ADAPTED: "training/adapted", LONG: "training/adapted_long",
            SILVER: "training/adapted_silver", SILVER_BC5: "training/adapted_silver_bc5"}
BC5CDR_TRAIN, NCBI_TRAIN = SHARED / "bc5cdr" / "CDR_TrainingSet.PubTator.txt", SHARED / "ncbi-disease" / "NCBItrainset_corpus.txt"
# encoder → (report key, silver corpus, its raw text): session 35's text held NCBI disease train too, session 36's
# (the all_silver workflow's) BC5CDR train only
SILVER_RUNS = {SILVER: ("silver", "corpus/silver_mesh.spacy", f"{BC5CDR_TRAIN} {NCBI_TRAIN}"),
               SILVER_BC5: ("silver_bc5", "corpus/silver_mesh_bc5.spacy", f"{BC5CDR_TRAIN}")}


def silver_command(corpus: str, texts: str) -> str:
    return (f"python -m spacy_pel silver {texts} --kb {SHARED / 'mesh'} --format mesh "
            f"--types 'Chemicals and Drugs' --types Diseases --swap 0.5 --skip-bad-lines -o {corpus}")


def silver_options(corpus: str) -> str:
    return (f" --config configs/adapt.cfg --paths.train {corpus} --synonyms.replay 0.5 --training.epochs 0"
            " --encoder.mention_max_length 64")
INPUTS = {"mention text only": False, "mention in context (64 pieces)": True}


def markdown(r: dict) -> str:
    lines = ["# Issue 28: the KB-adapted encoder alone (no mention training) vs base MiniLM", "",
             machine_line(r["machine"]) + "; alone.", "",
             f"Reproduce: `python benchmarks/adapt_alone.py` (adapt: `{r.get('adapt', {}).get('command', '')}`, "
             f"{r.get('adapt', {}).get('minutes', '?')} min). Evaluation: BC5CDR dev gold mentions (in MeSH) vs the dev gold "
             f"entities + {SAMPLE:,} random MeSH records, encoded by each encoder's own entity tower (benchmarks/subset_eval.py; "
             "not comparable with all-MeSH figures). Unseen: gold entity absent from BC5CDR train.", "",
             "| input | encoder | R@1 | unseen R@1 | seen R@1 | R@64 | Δ R@1 vs base | Δ unseen vs base |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for inp in INPUTS:
        base = r["results"].get(inp, {}).get(next(iter(ENCODERS)))
        for enc in ENCODERS:
            x = r["results"].get(inp, {}).get(enc)
            if x:
                delta = (f"{(x['R@1'] - base['R@1']) * 100:+.1f} pt | {(x['unseen'] - base['unseen']) * 100:+.1f} pt"
                         if base and x is not base else "– | –")
                lines.append(f"| {inp} | {enc} | {x['R@1']:.4f} | {x['unseen']:.4f} | {x['seen']:.4f} | {x['R@64']:.4f} | {delta} |")
    best = {enc: max((r["results"][inp][enc] for inp in INPUTS if enc in r["results"].get(inp, {})),
                     key=lambda x: x["R@1"], default=None) for enc in ENCODERS}
    if best[BASE]:
        lines += ["", "Each encoder in its best input against base MiniLM in its best input: " + "; ".join(
            f"{enc}: {(x['R@1'] - best[BASE]['R@1']) * 100:+.1f} pt R@1, {(x['unseen'] - best[BASE]['unseen']) * 100:+.1f} pt unseen"
            for enc, x in best.items() if x and enc != BASE) + "."]
    if r.get("adapt_long"):
        a = r["adapt_long"]
        lines += ["", f"The longer run: `{a['command']}` ({a['minutes']} min this time, resuming the 15-min run's state; "
                  f"{a['steps']} steps in {a['train_minutes']} min of training in all; held-out synonym R@1 {a['held_out_r1']})."]
    for enc, (key, _, _) in SILVER_RUNS.items():
        if r.get(f"adapt_{key}"):
            a, c = r[f"adapt_{key}"], r.get(key, {})
            lines += ["", f"{enc}: `{c.get('command', '')}` ({c.get('minutes', '?')} min; {c.get('mentions', '?')} mentions "
                      f"of {c.get('entities', '?')} entities in {c.get('docs', '?')} abstracts), then `{a['command']}` "
                      f"({a['minutes']} min; {a['steps']} steps; held-out synonym R@1 {a['held_out_r1']})."]
    if r.get("notes"):
        lines += ["", r["notes"]]
    return "\n".join(lines) + "\n"


def corpus_counts(path) -> dict:
    """Docs, mentions and distinct entities of a ``.spacy`` corpus."""
    docs = read_docbin(spacy.blank("en"), path)
    ids = [s.kb_id_ for d in docs for s in gold_spans(d)]
    return {"docs": len(docs), "mentions": len(ids), "entities": len(set(ids))}


def adapt(report: dict, key: str, output: str, minutes: float, start_from: str = "", options: str = "") -> None:
    """Run ``adapt`` into ``output`` (resuming ``start_from``'s state when given) unless it is done."""
    if (ROOT / output / "pel_encoder.json").exists() and key in report:
        return
    if start_from and not (ROOT / f"{output}.work").exists():
        shutil.copytree(ROOT / f"{start_from}.work", ROOT / f"{output}.work")
    command = f"python -m spacy_pel adapt {SHARED / 'mesh'} --format mesh -o {output} --max-minutes {minutes}{options}"
    minutes = run_timed(command)
    log = json.loads((ROOT / output / "adapt_log.json").read_text())
    report[key] = {"command": command, "minutes": minutes, "steps": log["step"],
                   "train_minutes": round(log["train_seconds"] / 60, 1), "held_out_r1": log["best"]}


def main(minutes: float = typer.Option(15.0, help="adapt's time budget"),
         long_minutes: float = typer.Option(50.0, help="the longer run's budget (counted from the 15-min run's start)"),
         notes: str = typer.Option("")):
    out = HERE / "adapt_alone.json"
    report = json.loads(out.read_text()) if out.exists() else {"results": {}}
    report["machine"] = {**machine(), "lscpu_model": lscpu_model()}
    if notes:
        report["notes"] = notes
    done = {enc for inp in INPUTS for enc in report["results"].get(inp, {})}
    if ADAPTED not in done or LONG not in done:
        adapt(report, "adapt", "training/adapted", minutes)
    if LONG not in done:
        adapt(report, "adapt_long", "training/adapted_long", long_minutes, start_from="training/adapted")
    for enc, (key, corpus, texts) in SILVER_RUNS.items():
        if enc not in done:
            command = silver_command(corpus, texts)
            if not (ROOT / corpus).exists():
                report[key] = {"command": command, "minutes": run_timed(command)}
            report.setdefault(key, {"command": command}).update(corpus_counts(ROOT / corpus))
            adapt(report, f"adapt_{key}", ENCODERS[enc], minutes, options=silver_options(corpus))
    out.write_text(json.dumps(report, indent=2), encoding="utf8")
    for inp, context in INPUTS.items():
        evaluation = None
        for enc, path in ENCODERS.items():
            if enc not in report["results"].get(inp, {}):
                evaluation = evaluation or SubsetEval(context=context)
                report["results"].setdefault(inp, {})[enc] = evaluation.evaluate(path if path.startswith("all-") else ROOT / path)
                out.write_text(json.dumps(report, indent=2), encoding="utf8")
    out.write_text(json.dumps(report, indent=2), encoding="utf8")
    out.with_suffix(".md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
