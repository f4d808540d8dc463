"""spaCy's entity-linking tutorial data (``nel_emerson``: three Wikidata Emersons, 30 annotated sentences) linked
the way a spaCy user who has those files would: the KB from its ``entities.csv`` (``build-kb --format csv``: a
name and a one-line description each), the annotations from Prodigy's JSONL (``convert``, ``.jsonl``), then
``evaluate --kb``: the retriever alone, gold mentions, no training on this data.

Each case is an encoder: base MiniLM (the bundled default), and with ``--pipeline`` a trained pipeline's encoder and
its mention tower moved back toward the base (``benchmarks/wise_ft.py``'s interpolation, ``--alpha``): what a
retriever trained on biomedical abstracts keeps of general-domain linking. Thirty mentions: a smoke test of the
route and a direction, not a benchmark (SOURCE.md of the data says as much).

    python benchmarks/emerson.py --pipeline training/pipeline_calibrated --alpha 0.8 --alpha 0.5 --work /tmp/emerson
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

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
    spacy_pel,
)
from spacy_pel.models.encoder import DEFAULT_ENCODER
from wise_ft import ENCODER, interpolate

DATA = SHARED / "nel-emerson"
app = typer.Typer(add_completion=False)


def measure(encoder: str, corpus: Path, work: Path) -> dict:
    kb, out = work / "kb", work / "eval.json"
    spacy_pel("build-kb", "--kb", str(DATA / "entities.csv"), "--format", "csv", "--encoder", encoder, "--output", str(kb), "--force")
    return evaluate_figures(corpus, out, ("mentions", "r1", "r2"), kb=kb)


@app.command()
def main(work: Path = typer.Option(..., help="where the KBs, the corpus and the encoders go"),
         pipeline: Optional[Path] = typer.Option(None, help="a trained pipeline whose encoder is measured too"),
         alpha: List[float] = typer.Option([], help="with --pipeline: its mention tower at base + α (trained − base)"),
         output: str = typer.Option("emerson", help="report name in benchmarks/"),
         notes: str = typer.Option("")):
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "emerson.spacy"
    spacy_pel("convert", str(DATA / "emerson_annotated_text.jsonl"), str(corpus))
    cases = [("base MiniLM (all-MiniLM-L6-v2, no training)", DEFAULT_ENCODER, None)]
    if pipeline is not None:
        cases.append((f"{pipeline.name}'s encoder (α 1)", str(pipeline / ENCODER), 1.0))
        for a in alpha:
            encoder = work / f"encoder_{a:g}"
            if not (encoder / "pel_encoder.json").exists():
                interpolate(pipeline / ENCODER, DEFAULT_ENCODER, a, encoder)
            cases.append((f"{pipeline.name}'s encoder, mention tower at α {a:g}", str(encoder), a))
    rows = [{"case": title, "encoder": encoder, "alpha": a, **measure(encoder, corpus, work)} for title, encoder, a in cases]
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "pipeline": str(pipeline or ""), "rows": rows,
              "command": invocation(), "notes": notes}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


def markdown(r: dict) -> str:
    lines = ["# spaCy's entity-linking tutorial data (three Wikidata Emersons), linked with no training on it", "",
             machine_line(r["machine"]) + ".", "",
             "Module doc of `benchmarks/emerson.py`: `build-kb --format csv` on the tutorial's `entities.csv`, `convert` of its "
             "Prodigy annotations, `evaluate --kb` (the retriever alone; gold mentions, all of them the word *Emerson*).", "",
             "| encoder | mentions | R@1 | R@2 |", "|---|---:|---:|---:|"]
    lines += [f"| {row['case']} | {row['mentions']} | **{row['r1']:.3f}** | {row['r2']:.3f} |" for row in r["rows"]]
    return "\n".join(lines + report_footer(r))


if __name__ == "__main__":
    app()
