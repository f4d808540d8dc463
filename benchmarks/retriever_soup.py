"""Retriever weight averaging ("model soups", Wortsman et al. 2022): do retrievers trained with other
seeds, averaged weight by weight, link better than one of them, at no cost at inference?

Each case averages the mention towers and the entity towers of some saved retrievers (all started from
one base encoder) into one encoder, then runs the workflow's later steps with it in a workspace where
the preset's ``all`` ran (the KB and name rows encoded by the averaged entity tower, the pipeline
assembled with the workspace's aliases and linker config, NIL calibration, evaluation on dev gold
mentions). A case with one retriever runs the same chain on it, so a soup is read against its ingredients.

    python benchmarks/retriever_soup.py --args configs/datasets/ncbi_medic_both.args --workspace WS1 \\
        --case "seed 1=WS1/training/ncbi_medic_both/retriever/best" \\
        --case "seeds 1+2=WS1/training/ncbi_medic_both/retriever/best,WS2/training/ncbi_medic_both/retriever/best" \\
        --work /tmp/soup --output retriever_soup_ncbi
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import torch
import typer

from _common import HERE, ROOT, invocation, lscpu_model, machine, machine_line, report_footer
from dataset_workflow import preset_vars
from spacy_pel.models.encoder import BiEncoder


def workflow_vars(args_file: Path) -> Dict[str, str]:
    """The vars the preset's workflow ran with (:func:`dataset_workflow.preset_vars`), ``${vars.NAME}`` in them resolved."""
    values = preset_vars(shlex.split(args_file.read_text(encoding="utf8")))
    return {k: re.sub(r"\$\{vars\.(\w+)\}", lambda m: values[m.group(1)], v) for k, v in values.items()}


def average(sources: List[str], output: Path) -> None:
    """One encoder whose two towers are the element-wise means of ``sources``' towers."""
    encoders = [BiEncoder.from_pretrained(s) for s in sources]
    soup = encoders[0]
    for tower in ("mention_model", "entity_model"):
        states = [getattr(e, tower).state_dict() for e in encoders]
        mean = {k: torch.stack([s[k].float() for s in states]).mean(0).to(v.dtype) if v.is_floating_point() else v
                for k, v in states[0].items()}
        getattr(soup, tower).load_state_dict(mean)
    soup.save(output)


def run_case(name: str, sources: List[str], v: Dict[str, str], workspace: Path, work: Path) -> dict:
    out = work / re.sub(r"[^\w.-]+", "_", name)  # a folder name the shell steps need not quote
    average(sources, out / "encoder")
    py, sub = shlex.quote(sys.executable), v["subdir"]
    steps = [
        f"{py} -m spacy_pel.build_kb --kb {v['kb_source']} --format {v['kb_format']} --encoder {out}/encoder "
        f"--output {out}/kb --reuse kbs/{v['kb']} --force",
        f"{py} -m spacy_pel build-names {out}/kb --output {out}/names",
        f"{py} -m spacy assemble {v['linker_config']} {out}/pipeline --paths.kb {out}/kb --paths.encoder {out}/encoder "
        f"--paths.aliases training{sub}/aliases.json --paths.names {out}/names "
        f"--components.pel_linker.context_window {v['context_window']}",
        f"{py} -m spacy_pel.calibrate {out}/pipeline corpus/{v['corpus']}_dev.spacy --output {out}/pipeline_calibrated "
        f"--nil {v['nil']} --max-r1-loss 0.01",
        f"{py} -m spacy_pel.evaluate corpus/{v['corpus']}_dev.spacy --pipeline {out}/pipeline_calibrated "
        f"--train corpus/{v['corpus']}_train.spacy --output {out}/dev.json",
    ]
    for command in steps:
        subprocess.run(command, shell=True, check=True, cwd=workspace)
    result = json.loads((out / "dev.json").read_text(encoding="utf8"))
    return {"case": name, "retrievers": sources, "r1": result["recall_in_kb"]["R@1"],
            "unseen_r1": result["recall_unseen"]["R@1"], "r64": result["recall_in_kb"]["R@64"], "mentions": result["mentions"]}


def markdown(r: dict) -> str:
    lines = [f"# Retriever weight averaging on {r['corpus']} (preset `{r['args']}`)", "", machine_line(r["machine"]) + ".", "",
             "Each case: the mention and entity towers of its retrievers averaged weight by weight, then the preset's "
             "final_kb, build_names, pipeline, calibrate and evaluate steps with that encoder in the workspace "
             f"`{r['workspace']}`; dev gold mentions, in-KB R@1 ({r['rows'][0]['mentions']} mentions).", "",
             "| case | retrievers | R@1 | unseen R@1 | R@64 |", "|---|---:|---:|---:|---:|"]
    for row in r["rows"]:
        lines.append(f"| {row['case']} | {len(row['retrievers'])} | **{row['r1']:.4f}** | {row['unseen_r1']:.4f} | {row['r64']:.4f} |")
    lines += ["", "Retrievers:", *[f"- {row['case']}: {', '.join(f'`{s}`' for s in row['retrievers'])}" for row in r["rows"]]]
    return "\n".join(lines + report_footer(r)) + "\n"


def main(args: Path = typer.Option(..., help="the preset file the workspace's `all` ran with"),
         workspace: Path = typer.Option(..., help="a clone where that `all` ran (its corpus, KB, aliases)"),
         case: List[str] = typer.Option(..., help="NAME=DIR[,DIR…]: the retrievers averaged (one: the chain on it alone)"),
         work: Path = typer.Option(..., help="where the averaged encoders, KBs and pipelines go"),
         output: str = typer.Option(..., help="report name in benchmarks/"), notes: str = typer.Option("")):
    v = workflow_vars(ROOT / args if not args.is_absolute() else args)
    rows = []
    for spec in case:
        name, _, dirs = spec.partition("=")
        rows.append(run_case(name, dirs.split(","), v, workspace, work))
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "args": str(args),
              "workspace": str(workspace), "corpus": v.get("corpus_title", v.get("corpus", "")), "rows": rows, "notes": notes}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
