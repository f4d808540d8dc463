"""Raw text with line breaks: an e2e pipeline on a dev corpus as distributed and hard-wrapped at 80
columns (the space before a word that would pass column 80 becomes a newline, as in a plain-text
export of an abstract; every character offset unchanged, so the gold mentions are the same).

A newline is a whitespace token with no word pieces. Before session 67 the span finder read such a
token's arbitrary tag probability as the word after a mention (and counted it in ``max_span_len``),
so a mention before a line break could be lost. Each case is linked with the code on the path: run it
once as it is and once with ``PYTHONPATH`` at a checkout from before the fix (``--output …_before``).

    python benchmarks/e2e_line_breaks.py --case "NAME=PIPELINE=CORPUS" … --output e2e_line_breaks
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import spacy
import typer
from spacy.tokens import Doc

from _common import HERE, e2e_arms_table, invocation, lscpu_model, machine, machine_line
from e2e_pipeline import run as run_pipeline  # load, warm up, link the raw text, score (benchmarks/ is on the path)
from spacy_pel.corpora import GOLD_KEY, read_docbin

WIDTH = 80


def wrapped(doc: Doc, width: int = WIDTH) -> Doc:
    """``doc`` hard-wrapped at ``width`` columns: its tokens, a newline token where a space was; the gold
    mentions at the same character offsets (a mention across a break holds the newline)."""
    words, spaces, col = [], [], 0
    for t in doc:
        if col + len(t.text) > width and words and spaces[-1] and doc.text[t.idx - 1] == " ":
            spaces[-1] = False
            words.append("\n")
            spaces.append(False)
            col = 0
        words.append(t.text)
        spaces.append(bool(t.whitespace_))
        col += len(t.text_with_ws)
    new = Doc(doc.vocab, words=words, spaces=spaces, user_data=dict(doc.user_data))
    assert len(new.text) == len(doc.text)

    def same(spans):
        out = [new.char_span(s.start_char, s.end_char, label=s.label_, kb_id=s.kb_id_, alignment_mode="strict") for s in spans]
        assert all(s is not None for s in out)
        return out
    new.spans[GOLD_KEY] = same(doc.spans[GOLD_KEY]) if GOLD_KEY in doc.spans else []
    new.ents = same(doc.ents)
    return new


def markdown(r: dict) -> str:
    lines = ["# An e2e pipeline on text with line breaks", "", f"{machine_line(r['machine'])}.", f"Reproduce: `{r['command']}`.", "",
             f"Each dev corpus as distributed and hard-wrapped at {WIDTH} columns ({r['breaks']} line breaks in all); "
             "the same gold mentions at the same offsets.", ""] + e2e_arms_table(r["cases"], "text")
    return "\n".join(lines + ["", r["notes"], ""] if r.get("notes") else lines + [""])


def main(case: List[str] = typer.Option(..., help="NAME=PIPELINE=CORPUS (an e2e pipeline and a gold .spacy corpus)"),
         output: str = typer.Option("e2e_line_breaks"), notes: str = typer.Option("")):
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "notes": notes, "cases": {}, "breaks": 0}
    for spec in case:
        name, pipeline, corpus = spec.split("=")
        docs = read_docbin(spacy.blank("en"), corpus)
        wraps = [wrapped(d) for d in docs]
        report["breaks"] += sum(t.text == "\n" for d in wraps for t in d)
        report["cases"][name] = {}
        for arm, arm_docs in (("as distributed", docs), (f"wrapped at {WIDTH} columns", wraps)):
            m = run_pipeline(Path(pipeline), arm_docs, tokenize=True)
            report["cases"][name][arm] = {k: m[k] for k in ("strict", "span", "predicted", "docs", "seconds")}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
