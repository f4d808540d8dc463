"""Task arithmetic (Ilharco et al. 2023; WiSE-FT, Wortsman et al. 2022): a trained retriever plus a share of what
KB self-alignment taught an encoder, added weight by weight, with no further training.

Both the retriever and the ``adapt`` encoder started from the same base encoder; the "task vector" of the
adapted one is its weights minus the base's. ``merge`` writes ``model + Σ λ_i (vector_i − base)`` for each
tower. The mention markers' embedding rows are kept as the model's: each ``BiEncoder`` built from the base draws
its own, so their difference to the base's is no learned change.
``measure`` runs the workflow's later steps with merged encoders in a workspace where a preset's ``all`` ran
(KB and name rows encoded by the merged entity tower, the pipeline assembled with the workspace's aliases,
calibrated, evaluated on dev gold mentions: ``retriever_soup.run_case`` with one encoder); on another KB,
``benchmarks/retarget.py run --encoder`` measures a merged encoder instead.

    python benchmarks/task_vectors.py merge --model training/pipeline_calibrated/pel_linker/encoder \\
        --vector training/adapted=0.5 --output training/merged_05
    python benchmarks/task_vectors.py measure --args EMPTY --workspace . --case "0.5=training/merged_05" \\
        --work training/bench/task_vectors --output task_vectors_bc5cdr
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import torch
import typer

from _common import HERE, ROOT, invocation, lscpu_model, machine, machine_line
from retriever_soup import run_case, workflow_vars
from spacy_pel.models.encoder import DEFAULT_ENCODER, BiEncoder


def merge(model: str, base: str, vectors: List[tuple], output: Path) -> None:
    """Write ``model`` + Σ λ (vector − ``base``), tower by tower, to ``output``."""
    target = BiEncoder.from_pretrained(model)
    origin = BiEncoder.from_pretrained(base)
    sources = [(BiEncoder.from_pretrained(path), weight) for path, weight in vectors]
    with torch.no_grad():
        for tower in ("mention_model", "entity_model"):
            start = getattr(origin, tower).state_dict()
            trained = [(getattr(source, tower).state_dict(), weight) for source, weight in sources]
            for name, value in getattr(target, tower).state_dict().items():
                if not value.is_floating_point():
                    continue
                delta = torch.zeros_like(value, dtype=torch.float32)
                for state, weight in trained:
                    delta += weight * (state[name].float() - start[name].float())
                if name.endswith("word_embeddings.weight") and tower == "mention_model":
                    delta[target.marker_ids] = 0
                if delta.any():  # adding zeros would turn -0.0 into 0.0, and the fingerprint with it
                    value.add_(delta.to(value.dtype))
    target.save(output)


app = typer.Typer(add_completion=False)


@app.command("merge")
def merge_command(model: str = typer.Option(..., help="the trained encoder (e.g. PIPELINE/pel_linker/encoder)"),
                  vector: List[str] = typer.Option(..., help="ENCODER=WEIGHT: an encoder trained from --base, and its share"),
                  base: str = typer.Option(DEFAULT_ENCODER, help="the encoder both started from"),
                  output: Path = typer.Option(..., help="the merged encoder's folder")):
    pairs = [(path, float(weight)) for path, _, weight in (v.rpartition("=") for v in vector)]
    merge(model, base, pairs, output)


@app.command()
def measure(args: Path = typer.Option(..., help="the preset file the workspace's `all` ran with"),
            workspace: Path = typer.Option(..., help="a clone where that `all` ran (its corpus, KB, aliases)"),
            case: List[str] = typer.Option(..., help="NAME=ENCODER: a merged encoder (or any other) to measure"),
            work: Path = typer.Option(..., help="where the KBs and pipelines go"),
            output: str = typer.Option(..., help="report name in benchmarks/ (its JSON gains the cases)"),
            notes: str = typer.Option("")):
    v = workflow_vars(args if args.is_absolute() else ROOT / args)
    path = HERE / f"{output}.json"
    old = json.loads(path.read_text(encoding="utf8")) if path.exists() else {}
    rows = old.get("rows", [])
    for spec in case:
        name, _, encoder = spec.partition("=")
        row = {**run_case(name, [encoder], v, workspace, work), "command": invocation()}
        rows = [r for r in rows if r["case"] != name] + [row]
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "args": str(args), "workspace": str(workspace),
              "corpus": v.get("corpus_title", v.get("corpus", "")), "rows": rows, "notes": notes or old.get("notes", "")}
    path.write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


def markdown(r: dict) -> str:
    lines = [f"# Task arithmetic on {r['corpus']}: a trained retriever plus a share of KB self-alignment", "",
             machine_line(r["machine"]) + ".", "",
             "Each case: a merged encoder (module doc of `benchmarks/task_vectors.py`), then the preset's final_kb, "
             f"build_names, pipeline, calibrate and evaluate steps with it in the workspace `{r['workspace']}`; dev gold "
             f"mentions, in-KB R@1 ({r['rows'][0]['mentions']} mentions).", "",
             "| case | R@1 | unseen R@1 | R@64 |", "|---|---:|---:|---:|"]
    for row in r["rows"]:
        lines.append(f"| {row['case']} | **{row['r1']:.4f}** | {row['unseen_r1']:.4f} | {row['r64']:.4f} |")
    lines += ["", "Commands:", "", *[f"- {row['case']}: `{row['command']}`" for row in r["rows"]]]
    if r.get("notes"):
        lines += ["", r["notes"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    app()
