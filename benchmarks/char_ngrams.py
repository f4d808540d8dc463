"""Issue 28, item 4 (BioSyn's lesson): does a sparse character n-gram score beside the dense one pay?

The pipeline as ``all`` assembles it is loaded once; ``spacy_pel.rules.char_ngrams.v1`` is inserted
before its label-types rule (as the rule's docstring says: after the name rows and the alias table) at
each weight, and BC5CDR dev gold mentions are linked against all MeSH (R@1, seen / unseen-entity R@1,
R@64, mentions/s). Weight 0 is the pipeline as shipped. Writes benchmarks/char_ngrams.{json,md}.

    python benchmarks/char_ngrams.py --pipeline training/pipeline_both --weights 0 --weights 0.1 --weights 0.2 --weights 0.4
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import spacy
import typer

from _common import HERE, ROOT, lscpu_model, machine
from spacy_pel.corpora import corpus_ids, read_docbin
from spacy_pel.evaluation.linking import canonical_ids, mention_table, metrics
from spacy_pel.pipeline.linker import find_linker
from spacy_pel.pipeline.rules.char_ngrams import CharNgramRule


def with_rule(rules: dict, rule, before: str = "label_types") -> dict:
    """``rules`` with ``rule`` inserted as ``char_ngrams`` before ``before`` (at the end without it)."""
    out, placed = {}, False
    for key, value in rules.items():
        if key == before and not placed:
            out["char_ngrams"], placed = rule, True
        if key != "char_ngrams":
            out[key] = value
    if not placed:
        out["char_ngrams"] = rule
    return out


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = ["# Issue 28, item 4: character n-gram score beside the dense one (BioSyn's sparse + dense)", "",
             f"Machine: {m.get('lscpu_model') or m['cpu']} ({', '.join(m['flags'])}), torch {m['torch']}. "
             f"Pipeline: `{r['pipeline']}` (rules: {', '.join(r['rules'])}); the rule goes before `label_types`.", "",
             f"Reproduce: `python benchmarks/char_ngrams.py --pipeline {r['pipeline']}" +
             "".join(f" --weights {w}" for w in r["runs"]) + "`", "",
             "| weight | R@1 | unseen R@1 | seen R@1 | R@64 | mentions/s |", "|---:|---:|---:|---:|---:|---:|"]
    for w, x in r["runs"].items():
        lines.append(f"| {w} | {x['R@1']:.4f} | {x['unseen']:.4f} | {x['seen']:.4f} | {x['R@64']:.4f} | {x['mentions_per_s']:,.0f} |")
    base = r["runs"].get("0.0") or r["runs"].get("0")
    if base:
        best = max(r["runs"].items(), key=lambda kv: kv[1]["R@1"])
        gain = best[1]["R@1"] - base["R@1"]
        lines += ["", f"Verdict: the best weight is {best[0]} ({gain * 100:+.2f} pt R@1, "
                      f"{(best[1]['unseen'] - base['unseen']) * 100:+.2f} pt unseen over the pipeline as shipped); "
                      + ("it is kept out of the shipped config: it does not pay." if gain < 0.002 else
                         "the gain is tuned on dev, so it is a candidate for the shipped config, not yet a default.")]
    return "\n".join(lines) + "\n"


def main(pipeline: Path = typer.Option(..., help="The pipeline as `all` assembles it"),
         weights: List[float] = typer.Option([0.0, 0.1, 0.2, 0.4]),
         dev: Path = typer.Option(ROOT / "corpus" / "bc5cdr_dev.spacy"),
         train: Path = typer.Option(ROOT / "corpus" / "bc5cdr_train.spacy"),
         output: Path = typer.Option(HERE / "char_ngrams")):
    nlp = spacy.load(pipeline)
    linker = find_linker(nlp)[1]
    linker.ensure_loaded()
    shipped = dict(linker.rules)
    docs = read_docbin(nlp, dev)
    train_ids = canonical_ids(linker, corpus_ids(read_docbin(nlp, train)))
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "pipeline": str(pipeline),
              "rules": list(shipped), "runs": {}}
    mention_table(linker, docs[:16])  # warm-up
    for weight in weights:
        rule = CharNgramRule(weight)
        rule.setup(linker.encoder, linker.index)
        linker.rules = with_rule(shipped, rule) if weight else shipped
        rows, seconds = mention_table(linker, docs, progress=True)
        m = metrics(rows, seconds, linker.index.row, train_ids, None)
        report["runs"][str(weight)] = {"R@1": m["recall_in_kb"]["R@1"], "R@64": m["recall_in_kb"]["R@64"],
                                       "unseen": m["recall_unseen"]["R@1"], "seen": m["recall_seen"]["R@1"],
                                       "mentions_per_s": m["mentions_per_s"]}
        output.with_suffix(".json").write_text(json.dumps(report, indent=2), encoding="utf8")
        output.with_suffix(".md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
