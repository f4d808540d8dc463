"""The span finder's ``lexicon`` (the training corpus's surface forms) on both end-to-end pipelines.

Each row loads an e2e pipeline as its workflow assembled it, with the span finder's ``lexicon`` off or set
to that workflow's aliases JSON (its training corpus's surface forms) and ``lexicon_floor`` varied
(``spacy.load(config=…)``; ``configs/linker_e2e.cfg`` ships the lexicon at floor 0.1), with and
without ``lexicon_extend`` (a match may replace the found spans it holds), and links raw text, scored by
:func:`spacy_pel.evaluation.linking.e2e_metrics`:

* BC5CDR dev docs 100-499 (docs 0-99 chose the span model's step and γ), the context-32 default;
* NCBI disease dev, all 100 docs (they chose its step and γ too: dev figures in the strictest sense).

    python benchmarks/e2e_lexicon.py     # writes benchmarks/e2e_lexicon.{json,md}; alone (it times docs/s)
"""
from __future__ import annotations

import json
from typing import List, Optional

import spacy
import typer

from _common import HERE, ROOT, invocation, lscpu_model, machine, machine_line
from e2e_pipeline import run as run_pipeline  # load, warm up, link the raw text, score (benchmarks/ is on the path)
from spacy_pel.corpora import read_docbin

KEY = "components.pel_linker.mentions."
FLOORS = (0.05, 0.1, 0.2)


def run(pipeline: str, dev: str, first: int, last: Optional[int], overrides: dict, corpus_tokens: bool) -> dict:
    return run_pipeline(ROOT / pipeline, read_docbin(spacy.blank("en"), ROOT / dev)[first:last], overrides, tokenize=not corpus_tokens)


def markdown(r: dict) -> str:
    lines = ["# The span finder's lexicon (training surface forms) end to end", "",
             f"{machine_line(r['machine'])}; alone. Reproduce: `{r['command']}`.",
             "", f"Input: the raw text with {'the corpus' if r.get('tokens') == 'corpus' else 'the pipeline'}'s tokens"
             + (" (split at the gold mentions' boundaries)." if r.get("tokens") == "corpus" else " (tokenized as a user's text is)."), ""]
    for name, c in r["corpora"].items():
        lines += [f"## {name}", "", f"Pipeline `{c['pipeline']}`, lexicon `{c['lexicon']}`, {c['docs']}.", "",
                  "| span finder | strict P | strict R | strict F1 | span F1 | predicted | docs/s |", "|---|---:|---:|---:|---:|---:|---:|"]
        for row, m in c["results"].items():
            s = m["strict"]
            lines.append(f"| {row} | {s['p']:.3f} | {s['r']:.3f} | **{s['f']:.3f}** | {m['span']['f']:.3f} | {m['predicted']} | {m['docs_per_s']} |")
        lines.append("")
    lines += [r["notes"], ""] if r.get("notes") else []
    return "\n".join(lines)


def main(bc5cdr_pipeline: str = typer.Option("training/context32/pipeline_e2e_calibrated"),
         bc5cdr_lexicon: str = typer.Option("training/context32/aliases.json"),
         ncbi_pipeline: str = typer.Option("training/ncbi_medic_both/pipeline_e2e_calibrated"),
         ncbi_lexicon: str = typer.Option("training/ncbi_medic_both/aliases.json"),
         floors: List[float] = typer.Option(list(FLOORS)), output: str = typer.Option("e2e_lexicon"), notes: str = typer.Option(""),
         corpus_tokens: bool = typer.Option(False, help="Give the pipelines the corpus's tokens (split at the gold boundaries: "
                                            "how e2e_lexicon.md measured) instead of the text tokenized as a user's is")):
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "notes": notes, "corpora": {},
              "tokens": "corpus" if corpus_tokens else "pipeline"}
    for name, pipeline, lexicon, dev, first, last, docs in (
        ("BC5CDR dev docs 100-499 vs MeSH", bc5cdr_pipeline, bc5cdr_lexicon, "corpus/bc5cdr_dev.spacy", 100, 500, "dev docs 100-499"),
        ("NCBI disease dev vs MEDIC", ncbi_pipeline, ncbi_lexicon, "corpus/ncbi_dev.spacy", 0, None, "all 100 dev docs"),
    ):
        rows = {"no lexicon": {KEY + "lexicon": None}}
        rows.update({f"lexicon, floor {f}": {KEY + "lexicon": str(ROOT / lexicon), KEY + "lexicon_floor": f,
                                              KEY + "lexicon_extend": False} for f in floors})
        rows.update({f"lexicon, floor {f}, extend": {KEY + "lexicon": str(ROOT / lexicon), KEY + "lexicon_floor": f,
                                                      KEY + "lexicon_extend": True} for f in floors})
        results = {row: run(pipeline, dev, first, last, ov, corpus_tokens) for row, ov in rows.items()}
        report["corpora"][name] = {"pipeline": pipeline, "lexicon": lexicon, "docs": docs, "results": results}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
