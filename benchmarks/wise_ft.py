"""WiSE-FT (Wortsman et al. 2022) on the mention tower: a trained retriever's mention tower moved back toward
the base encoder it started from, ``base + α (trained − base)``, with no further training.

Fine-tuning on one corpus narrows what the mention tower knows (spaCy's entity-linking tutorial data, three
Wikidata Emersons: base MiniLM links 25 of 30 mentions, the BC5CDR retriever 13); WiSE-FT's claim is that the
interpolation keeps the fine-tuned accuracy and regains robustness off its distribution. The default recipe
leaves the entity tower frozen, so only the mention tower differs from the base: the KB and the name rows are
unchanged, and each α is a copy of the pipeline (everything but the mention tower linked, not copied) evaluated
with ``python -m spacy_pel evaluate`` on each case's corpus.

    python benchmarks/wise_ft.py --case "BC5CDR dev (MeSH)=training/pipeline_calibrated=corpus/bc5cdr_dev.spacy" \\
        --train corpus/bc5cdr_train.spacy --alpha 1 --alpha 0.8 --work training/bench/wise_ft --output wise_ft
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import List

import torch
import typer

from _common import HERE, evaluate_figures, invocation, lscpu_model, machine, machine_line
from spacy_pel.models.encoder import DEFAULT_ENCODER, BiEncoder

app = typer.Typer(add_completion=False)
WISE_FT_FIGURES = ("mentions", "r1", "unseen_r1", "seen_r1", "r64")
ENCODER = Path("pel_linker") / "encoder"


def interpolate(trained: Path, base: str, alpha: float, output: Path) -> None:
    """``trained``'s encoder with its mention tower at ``base + α (trained − base)`` (the marker rows as
    trained: the base has none); refuses an encoder whose entity tower is not the base's."""
    model, origin = BiEncoder.from_pretrained(str(trained)), BiEncoder.from_pretrained(base)
    theirs = origin.entity_model.state_dict()
    if any(not torch.equal(v, theirs[k]) for k, v in model.entity_model.state_dict().items()):
        raise typer.BadParameter(f"{trained}: its entity tower was trained; the KB would need encoding again")
    start = origin.mention_model.state_dict()
    with torch.no_grad():
        for name, value in model.mention_model.state_dict().items():
            if not value.is_floating_point():
                continue
            mixed = start[name].float() + alpha * (value.float() - start[name].float())
            if name.endswith("word_embeddings.weight"):
                mixed[model.marker_ids] = value[model.marker_ids].float()
            value.copy_(mixed.to(value.dtype))
    model.save(output)


def pipeline_copy(pipeline: Path, encoder: Path, output: Path) -> None:
    """``pipeline`` with ``encoder`` in it; every other part linked to the original, not copied."""
    if output.exists():
        shutil.rmtree(output)
    for item in pipeline.rglob("*"):
        rel = item.relative_to(pipeline)
        if item.is_dir() or rel.parts[:2] == ENCODER.parts:
            continue
        (output / rel).parent.mkdir(parents=True, exist_ok=True)
        (output / rel).symlink_to(item.resolve())
    shutil.copytree(encoder, output / ENCODER)


@app.command()
def main(case: List[str] = typer.Option(..., help="TITLE=PIPELINE=CORPUS: a pipeline (its entity tower the base's) and a gold corpus of its KB"),
         train: Path = typer.Option(..., help="the retriever's training corpus (seen / unseen)"),
         alpha: List[float] = typer.Option(..., help="the share of the fine-tuning kept (1: the trained tower)"),
         base: str = typer.Option(DEFAULT_ENCODER, help="the encoder the retriever started from"),
         work: Path = typer.Option(..., help="where the encoders and pipeline copies go"),
         output: str = typer.Option("wise_ft", help="report name in benchmarks/"),
         notes: str = typer.Option("")):
    work = work.resolve()
    path = HERE / f"{output}.json"
    old = json.loads(path.read_text(encoding="utf8")) if path.exists() else {}
    rows = old.get("rows", [])
    for spec in case:
        title, pipe, corpus = spec.split("=")
        pipe = Path(pipe).resolve()
        for a in alpha:
            encoder = work / f"encoder_{pipe.parent.name}_{pipe.name}_{a:g}"
            if not (encoder / "pel_encoder.json").exists():
                interpolate(pipe / ENCODER, base, a, encoder)
            copy = work / f"pipeline_{len(rows)}"
            pipeline_copy(pipe, encoder, copy)
            row = {"case": title, "alpha": a, "pipeline": str(pipe), "command": invocation(),
                   **evaluate_figures(Path(corpus).resolve(), work / f"eval_{len(rows)}.json", WISE_FT_FIGURES, pipeline=copy, train=train.resolve())}
            shutil.rmtree(copy)
            rows = [r for r in rows if (r["case"], r["alpha"]) != (title, a)] + [row]
            report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "rows": rows, "command": invocation(),
                      "notes": notes or old.get("notes", "")}
            path.write_text(json.dumps(report, indent=2), encoding="utf8")
            (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


def markdown(r: dict) -> str:
    lines = ["# WiSE-FT on the mention tower: a trained retriever interpolated toward its base encoder", "",
             machine_line(r["machine"]) + ".", "",
             "Module doc of `benchmarks/wise_ft.py`: the mention tower at base + α (trained − base), the KB, name rows, "
             "rules and NIL settings of the pipeline unchanged; gold mentions, in-KB R@1, seen / unseen against the "
             "retriever's training corpus.", "",
             "| case | α | mentions | R@1 | unseen R@1 | seen R@1 | R@64 |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in sorted(r["rows"], key=lambda x: (x["case"], -x["alpha"])):
        seen, unseen = (("–" if v is None else f"{v:.4f}") for v in (row["seen_r1"], row["unseen_r1"]))
        lines.append(f"| {row['case']} | {row['alpha']:g} | {row['mentions']} | **{row['r1']:.4f}** | {unseen} | {seen} | {row['r64']:.4f} |")
    commands = list(dict.fromkeys(row["command"] for row in r["rows"]))
    return "\n".join(lines + ["", "Written by:", "", *[f"- `{c}`" for c in commands], "", *([r["notes"], ""] if r.get("notes") else [])])


if __name__ == "__main__":
    app()
