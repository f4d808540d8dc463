"""What the linker's remaining misses are (issues 28 and 29): every in-KB gold mention a pipeline links
to the wrong entity, by cause (:mod:`spacy_pel.evaluation.errors`: the mention's text is a KB name of
the gold entity, alone or shared with others; a training alias of it; or neither), with the largest
groups of each cause and what each would be worth.

``add`` links one dev corpus's gold mentions with a saved pipeline (as ``python -m spacy_pel evaluate
--errors`` does) and adds a case to the report; ``report`` rewrites the markdown from the JSON.

    python benchmarks/miss_causes.py add --case "BC5CDR dev (MeSH), default all" --pipeline training/pipeline_calibrated \\
        --dev corpus/bc5cdr_dev.spacy --train corpus/bc5cdr_train.spacy
    python benchmarks/miss_causes.py add --case "NCBI dev vs MEDIC, BC5CDR-trained (transfer)" --pipeline training/pipeline_calibrated \
        --kb WORK/medic_kb --work WORK --dev WORK/ncbi_dev.spacy --train corpus/bc5cdr_train.spacy  # accuracy.py's MEDIC KB
    python benchmarks/miss_causes.py report
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import typer

from _common import HERE, invocation, lscpu_model, machine, machine_line
from accuracy import load
from spacy_pel.corpora import corpus_ids, read_docbin
from spacy_pel.evaluation.errors import CAUSES, mention_errors, summary, surface_ids
from spacy_pel.evaluation.linking import canonical_ids, mention_table, metrics
from spacy_pel.files import write_jsonl

OUTPUT = HERE / "miss_causes"
GROUPS = 8
app = typer.Typer(add_completion=False)


def groups(errors: list, cause: str) -> list:
    """The largest groups of one cause's misses: (count, mention text, gold names, predicted name, gold rank)."""
    counted = Counter((e["text"].lower(), " / ".join(e["gold_names"]), e["first_candidate_name"]) for e in errors
                      if e["kind"] == "wrong_entity" and e["cause"] == cause)
    return [[n, *key] for key, n in counted.most_common(GROUPS)]


@app.command()
def add(case: str = typer.Option(..., help="the case's name in the report"),
        pipeline: Path = typer.Option(..., help="a saved calibrated pipeline"),
        dev: Path = typer.Option(..., help="gold .spacy corpus"), train: Path = typer.Option(..., help="its training corpus"),
        kb: Path = typer.Option(None, help="link against this KB folder instead of the pipeline's (its name rows made in --work)"),
        work: Path = typer.Option(None, help="folder for the name rows of --kb"),
        encoder: str = typer.Option(None, help="link with this encoder instead of the pipeline's (a --kb it built)"),
        errors_file: Path = typer.Option(None, help="also write the errors here (JSONL)"),
        output: Path = typer.Option(OUTPUT, help="report path without suffix")):
    nlp, linker = load(pipeline, kb, work, {"components.pel_linker.encoder": encoder} if encoder else None)
    docs, train_docs = read_docbin(nlp, dev), read_docbin(nlp, train)
    linker.ensure_loaded()
    train_ids = canonical_ids(linker, corpus_ids(train_docs))
    rows, seconds = mention_table(linker, docs, progress=True)
    report = metrics(rows, seconds, linker.index.row, train_ids, linker.threshold)
    errors = mention_errors(rows, docs, linker.index, linker.threshold, surface_ids(train_docs, linker.index.canonical), train_ids)
    if errors_file:
        write_jsonl(errors, errors_file)
    wrong = [e for e in errors if e["kind"] == "wrong_entity"]
    entry = {"case": case, "pipeline": str(pipeline), "kb": str(kb) if kb else None, "encoder": encoder, "dev": str(dev), "train": str(train), "command": invocation(),
             "in_kb": report["counts"]["in_kb"], "R@1": report["recall_in_kb"]["R@1"], "R@64": report["recall_in_kb"]["R@64"],
             "unseen R@1": report["recall_unseen"].get("R@1"), **summary(errors),
             "unseen_causes": dict(Counter(e["cause"] for e in wrong if not e.get("seen"))),
             "gold_in_candidates": dict(Counter(e["cause"] for e in wrong if e["gold_rank"] is not None)),
             "groups": {cause: groups(errors, cause) for cause in CAUSES}}
    path = output.with_suffix(".json")
    old = json.loads(path.read_text()) if path.exists() else {}
    cases = [c for c in old.get("cases", []) if c["case"] != case] + [entry]
    result = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "cases": cases, "notes": old.get("notes", "")}
    path.write_text(json.dumps(result, indent=2), encoding="utf8")
    output.with_suffix(".md").write_text(markdown(result), encoding="utf8")


@app.command()
def report(output: Path = typer.Option(OUTPUT, help="report path without suffix")):
    output.with_suffix(".md").write_text(markdown(json.loads(output.with_suffix(".json").read_text())), encoding="utf8")


WHAT = {"gold_name_unique": "a KB name of the gold entity only", "gold_name_shared": "a KB name of the gold entity and of others",
        "training_alias": "not a KB name of the gold entity; linked to it in training", "no_name": "neither"}


def markdown(r: dict) -> str:
    lines = ["# What the remaining misses are: in-KB gold mentions linked to the wrong entity, by cause", "",
             machine_line(r["machine"]) + ".", "",
             "A miss's cause is what the KB's names and the training corpus say about its text (`spacy_pel/evaluation/errors.py`, "
             "`python -m spacy_pel evaluate --errors FILE`): " + "; ".join(f"`{c}`: {w}" for c, w in WHAT.items()) + ". "
             "*R@1 if fixed* adds that cause's misses to the hits: what a linker that resolved every such case would reach.", ""]
    for c in r["cases"]:
        n, hits = c["in_kb"], round(c["R@1"] * c["in_kb"])
        lines += [f"## {c['case']}", "", f"`{c['command']}`", "",
                  f"{n} in-KB mentions, R@1 {c['R@1']:.4f} (unseen {c['unseen R@1']:.4f}), R@64 {c['R@64']:.4f}; errors by kind: "
                  + ", ".join(f"{k} {v}" for k, v in c["kinds"].items()) + ".", "",
                  "| cause | misses | of them unseen | gold among the candidates | R@1 if fixed |", "|---|---:|---:|---:|---:|"]
        for cause in CAUSES:
            m = c["wrong_entity_causes"][cause]
            lines.append(f"| `{cause}` | {m} | {c['unseen_causes'].get(cause, 0)} | {c['gold_in_candidates'].get(cause, 0)} "
                         f"| {(hits + m) / n:.4f} |")
        named = sum(c["wrong_entity_causes"][k] for k in CAUSES if k != "no_name")
        lines += ["", f"Every miss but `no_name` resolved: R@1 {(hits + named) / n:.4f}.", ""]
        for cause in CAUSES:
            if c["groups"][cause]:
                lines += [f"Largest `{cause}` groups (count: mention → gold / predicted): "
                          + "; ".join(f"{k}: *{t}* → {g} / {p}" for k, t, g, p in c["groups"][cause]) + ".", ""]
    if r.get("notes"):
        lines += [r["notes"], ""]
    return "\n".join(lines)


if __name__ == "__main__":
    app()
