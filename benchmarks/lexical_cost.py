"""What the NIL classifier's lexical evidence (``chars``, ``words``: :func:`spacy_pel.pipeline.nil.lexical_evidence`)
costs a user: one ``nlp.pipe`` pass over BC5CDR dev docs 20-499 (gold spans as ``doc.ents``, after a
warm-up on docs 0-19), with the time spent inside ``lexical_evidence`` measured apart. Whole-pass
mentions/s vary by ±20% between fresh processes on a shared VM (``benchmarks/user_speed_*.md``); the
share of the pass spent on the evidence does not.

    python benchmarks/lexical_cost.py --pipeline training/context32/pipeline_calibrated
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import spacy
import typer
from spacy.tokens import DocBin

import spacy_pel.pipeline.nil as nil_module
from _common import ROOT, invocation, machine, machine_line

WARM_UP = 20


def measure(pipeline: Path, dev: Path, passes: int) -> dict:
    spent = {"seconds": 0.0, "mentions": 0}
    original = nil_module.lexical_evidence

    def timed(texts, *args, **kwargs):
        start = time.perf_counter()
        out = original(texts, *args, **kwargs)
        spent["seconds"] += time.perf_counter() - start
        spent["mentions"] += len(texts)
        return out

    nil_module.lexical_evidence = timed  # nil_features looks it up in its module at each call
    nlp = spacy.load(pipeline)
    docs = list(DocBin().from_disk(dev).get_docs(nlp.vocab))
    list(nlp.pipe(docs[:WARM_UP]))
    rows = []
    for _ in range(passes):
        spent.update(seconds=0.0, mentions=0)
        fresh = list(DocBin().from_disk(dev).get_docs(nlp.vocab))[WARM_UP:]
        start = time.perf_counter()
        mentions = sum(len(doc.ents) for doc in nlp.pipe(fresh))
        total = time.perf_counter() - start
        rows.append({"mentions": mentions, "pass_seconds": round(total, 3), "lexical_seconds": round(spent["seconds"], 3),
                     "lexical_mentions": spent["mentions"], "share": round(spent["seconds"] / total, 4),
                     "us_per_mention": round(1e6 * spent["seconds"] / max(spent["mentions"], 1), 1)})
    return {"pipeline": str(pipeline), "passes": rows}


def main(
    pipeline: Path = typer.Option(..., help="Saved pipeline whose NIL classifier weighs chars/words"),
    dev: Path = typer.Option(ROOT / "corpus" / "bc5cdr_dev.spacy"),
    passes: int = typer.Option(3, help="Timed passes over docs 20-499 (the first is what a user gets; later ones may hit the linker's caches)"),
    output: Path = typer.Option(ROOT / "benchmarks" / "lexical_cost"),
    notes: str = typer.Option(""),
):
    report = {"machine": machine(), "command": invocation(), "notes": notes, **measure(pipeline, dev, passes)}
    output.with_suffix(".json").write_text(json.dumps(report, indent=1), encoding="utf8")
    lines = ["# What the NIL classifier's lexical evidence costs", "", machine_line(report["machine"]) + ".",
             f"Reproduce: `{report['command']}`", "",
             "| pass | mentions | pass s | in lexical_evidence s | share | µs / mention |", "|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {i + 1} | {r['mentions']} | {r['pass_seconds']} | {r['lexical_seconds']} | {r['share']:.1%} | {r['us_per_mention']} |"
              for i, r in enumerate(report["passes"])]
    lines += ["", __doc__.split("\n\n")[0].replace("\n", " "), "", notes]
    output.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
