"""The tokenizer a raw-text pipeline reads with: spaCy's English one against ``spacy_pel.tokenizer.v1``.

A span finder only finds spans whose boundaries are token boundaries. For each tokenizer: the gold
mentions no span of its tokens can match (their start or end falls inside a token), and the strict /
span e2e F1 of each e2e pipeline as its workflow assembled it, with its tokenizer replaced, on the raw
text tokenized as a user's is (BC5CDR dev docs 100-499, which chose neither the span model's step nor
γ; NCBI disease dev, all 100 docs).

    python benchmarks/e2e_tokenizer.py     # writes benchmarks/e2e_tokenizer.{json,md}
"""
from __future__ import annotations

import json
import time

import spacy
import typer
from spacy.util import registry

from _common import HERE, ROOT, invocation, machine, machine_line
from spacy_pel.corpora import gold_spans, read_docbin
from spacy_pel.evaluation.linking import e2e_metrics

TOKENIZERS = {"spaCy English (spacy.Tokenizer.v1)": "spacy.Tokenizer.v1", "spacy_pel.tokenizer.v1": "spacy_pel.tokenizer.v1"}


def unreachable(nlp, docs) -> int:
    """Gold mentions whose start or end falls inside one of ``nlp``'s tokens of the text."""
    missed = 0
    for doc in docs:
        tokens = nlp.make_doc(doc.text)
        starts, ends = {t.idx for t in tokens}, {t.idx + len(t) for t in tokens}
        missed += sum(s.start_char not in starts or s.end_char not in ends for s in gold_spans(doc))
    return missed


def measure(pipeline: str, corpus: str, first: int, last) -> dict:
    nlp = spacy.load(ROOT / pipeline)
    docs = read_docbin(nlp, ROOT / corpus)
    canonical = nlp.get_pipe("pel_linker").index.canonical
    out = {"pipeline": pipeline, "saved_tokenizer": nlp.config["nlp"]["tokenizer"]["@tokenizers"], "rows": {}}
    for label, name in TOKENIZERS.items():
        nlp.tokenizer = registry.tokenizers.get(name)()(nlp)
        part = docs[first:last]
        start = time.perf_counter()
        predicted = list(nlp.pipe([nlp.make_doc(d.text) for d in part]))
        seconds = time.perf_counter() - start
        m = e2e_metrics(predicted, part, canonical)
        out["rows"][label] = {"unreachable_all_dev": unreachable(nlp, docs), "gold_all_dev": sum(len(gold_spans(d)) for d in docs),
                              "strict": m["strict"], "span": m["span"], "predicted": m["predicted"], "docs": len(part),
                              "docs_per_s": round(len(part) / seconds, 2)}
    return out


def main(bc5cdr_pipeline: str = typer.Option("training/context32/pipeline_e2e_calibrated"),
         ncbi_pipeline: str = typer.Option("training/ncbi_medic_both/pipeline_e2e_calibrated"),
         output: str = typer.Option("e2e_tokenizer"), notes: str = typer.Option("")):
    report = {"machine": machine(), "command": invocation(), "notes": notes, "corpora": {
        "BC5CDR dev docs 100-499 vs MeSH": measure(bc5cdr_pipeline, "corpus/bc5cdr_dev.spacy", 100, 500),
        "NCBI disease dev vs MEDIC": measure(ncbi_pipeline, "corpus/ncbi_dev.spacy", 0, None)}}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=1), encoding="utf8")
    lines = ["# The tokenizer of a raw-text pipeline", "", machine_line(report["machine"]) + ".", f"Reproduce: `{report['command']}`", ""]
    for name, c in report["corpora"].items():
        lines += [f"## {name}", "", f"Pipeline `{c['pipeline']}` (saved with `{c['saved_tokenizer']}`), its tokenizer replaced per row.", "",
                  "| tokenizer | gold mentions no token span reaches (all dev) | strict P | strict R | strict F1 | span F1 | predicted | docs/s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for label, r in c["rows"].items():
            s = r["strict"]
            lines.append(f"| {label} | {r['unreachable_all_dev']} of {r['gold_all_dev']} | {s['p']:.3f} | {s['r']:.3f} | **{s['f']:.3f}** | "
                         f"{r['span']['f']:.3f} | {r['predicted']} | {r['docs_per_s']} |")
        lines.append("")
    lines += [__doc__.split("\n\n")[1].replace("\n", " "), "", notes]
    (HERE / f"{output}.md").write_text("\n".join(lines) + "\n", encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
