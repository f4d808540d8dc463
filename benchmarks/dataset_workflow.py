"""Run a workflow of project.yml for a dataset preset, step by step, timed, and report its figures.

    python benchmarks/dataset_workflow.py --args configs/datasets/ncbi_medic.args --workflow all --workflow e2e

Each step is ``python -m spacy project run STEP . <the preset's --vars lines>`` (what
``xargs -a PRESET python -m spacy project run all .`` runs, one step at a time so that each is timed;
weasel skips a step whose deps and outputs are unchanged, so the times are those of this run). The
figures are read from the evaluation reports the workflows write (``metrics<subdir>/<corpus>_dev.json``,
``…_dev_e2e.json``, ``…_dev_transfer.json``, ``…_dev_kb_only.json``), each only when the step that writes
it (:data:`FIGURE_STEPS`) ran in this invocation and succeeded: a file an earlier run left is never
reported as this run's. Writes ``benchmarks/<preset>_workflow.{json,md}``; a failed step makes the script
exit 1 (after writing the report, whose step table shows it).
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

import srsly
import typer

from _common import ROOT, machine, machine_line


def preset_vars(args: List[str]) -> Dict[str, str]:
    """``--vars.NAME VALUE`` pairs of a preset, with project.yml's defaults for the others."""
    values = dict(srsly.read_yaml(ROOT / "project.yml")["vars"])
    for key, value in zip(args[::2], args[1::2]):
        values[key.removeprefix("--vars.")] = value
    return {k: str(v) for k, v in values.items()}


# the project.yml steps that write an evaluation report → (its name in the figures, its file's suffix)
FIGURE_STEPS = {"evaluate": ("linking", ""), "evaluate_e2e": ("e2e", "_e2e"), "evaluate_transfer": ("transfer", "_transfer"),
                "evaluate_kb_only": ("kb_only", "_kb_only")}


def figures(values: Dict[str, str], steps: List[dict]) -> dict:
    """The headline figures of the evaluation reports that this run's ``steps`` wrote (exit status 0)."""
    out = {}
    base = ROOT / f"metrics{values['subdir']}" / f"{values['corpus']}_dev"
    for step in steps:
        if step["step"] in FIGURE_STEPS and step["rc"] == 0:
            name, suffix = FIGURE_STEPS[step["step"]]
            path = Path(f"{base}{suffix}.json")
            if path.exists():
                out[name] = json.loads(path.read_text())
    return out


def main(args: Path = typer.Option(..., exists=True, dir_okay=False, help="A dataset preset: --vars lines (configs/datasets/*.args)"),
         workflow: List[str] = typer.Option(["all"], help="Workflows of project.yml to run, in order"),
         notes: str = typer.Option("", help="A line about the run conditions"),
         output: str = typer.Option("", help="report name in benchmarks/ (default: <preset>_workflow)"),
         extra: str = typer.Option("", help="More --vars after the preset's (a later value wins), e.g. "
                                            "'--vars.align_steps 380'")):
    preset = shlex.split(args.read_text()) + shlex.split(extra)
    values = preset_vars(preset)
    workflows = srsly.read_yaml(ROOT / "project.yml")["workflows"]
    unknown = [w for w in workflow if w not in workflows]
    if unknown:  # refused before any step runs (a typo must not cost the 45 minutes of `all` first)
        raise typer.BadParameter(f"unknown workflow(s) {', '.join(unknown)}; project.yml has {', '.join(sorted(workflows))}")
    out = ROOT / "benchmarks" / (output or f"{args.stem}_workflow")
    report = {"machine": machine(), "preset": str(args), "extra": extra, "notes": notes, "output": output, "steps": []}
    for name in workflow:
        for step in workflows[name]:
            t0 = time.perf_counter()
            rc = subprocess.run([sys.executable, "-m", "spacy", "project", "run", step, str(ROOT), *preset], cwd=ROOT).returncode
            report["steps"].append({"workflow": name, "step": step, "minutes": round((time.perf_counter() - t0) / 60, 2), "rc": rc})
            out.with_suffix(".json").write_text(json.dumps(report, indent=2), encoding="utf8")
            if rc:  # the workflow's later steps need this one; the next workflow is still tried
                break
    report["figures"] = figures(values, report["steps"])
    out.with_suffix(".json").write_text(json.dumps(report, indent=2), encoding="utf8")
    out.with_suffix(".md").write_text(markdown(report, values), encoding="utf8")
    failed = [f"{s['workflow']}/{s['step']} (exit {s['rc']})" for s in report["steps"] if s["rc"]]
    if failed:
        raise SystemExit(f"dataset_workflow.py: step {', '.join(failed)} failed; {out.with_suffix('.md')} has no figure of the steps it stopped")


def gold_mention_table(e: dict, title: str) -> List[str]:
    """An evaluation report's recall@k (unseen R@1 where the workflow gave a training corpus) as markdown."""
    rk, un = e.get("recall_in_kb", {}), e.get("recall_unseen", {})
    lines = [f"## Gold mentions ({title})", "", "| measure | value |", "|---|---:|",
             f"| in-KB mentions | {e.get('counts', {}).get('in_kb', '–')} |"]
    lines += [f"| {k} | {v:.4f} |" for k, v in rk.items() if k.startswith("R@")]
    lines += [f"| unseen-entity {k} | {v:.4f} |" for k, v in un.items() if k == "R@1"]
    if "mentions_per_s" in e:
        lines.append(f"| mentions/s (evaluate) | {e['mentions_per_s']:,.0f} |")
    return lines + [""]


def markdown(r: dict, values: Dict[str, str]) -> str:
    m = r["machine"]
    lines = [f"# The workflows on {values['corpus_title']} + {values['kb_title']} (preset `{r['preset']}`)", "",
             machine_line(m) + ".",
             f"Reproduce: `python benchmarks/dataset_workflow.py --args {r['preset']} "
             + " ".join(f"--workflow {w}" for w in dict.fromkeys(s["workflow"] for s in r["steps"]))
             + (f" --output {r['output']}" if r.get("output") else "")
             + (f" --extra {shlex.quote(r['extra'])}" if r.get("extra") else "") + "` "
             f"(= `xargs -a {r['preset']} python -m spacy project run WORKFLOW .`"
             + (f" with `{r['extra']}` after the preset's lines" if r.get("extra") else "") + ", timed step by step).", ""]
    f = r.get("figures", {})
    built = next((s["workflow"] for s in r["steps"] if s["workflow"].startswith("all")), "all")
    for key, title in (("linking", f"the calibrated pipeline of `{built}`"),
                       ("transfer", f"the pipeline of `transfer`: {values['transfer_from']} retargeted"),
                       ("kb_only", "the pipeline of `kb_only`: the encoder taught the KB alone, no annotated text")):
        if key in f:
            lines += gold_mention_table(f[key], title)
    if "e2e" in f:
        lines += ["## End to end from raw text (`e2e`)", "", "```json", json.dumps({k: v for k, v in f["e2e"].items()
                                                                                     if not isinstance(v, list)}, indent=1)[:3000], "```", ""]
    total = sum(s["minutes"] for s in r["steps"])
    lines += ["## Step times", "", "| workflow | step | minutes | exit |", "|---|---|---:|---:|"]
    lines += [f"| {s['workflow']} | {s['step']} | {s['minutes']} | {s['rc']} |" for s in r["steps"]]
    lines += [f"| | **total** | **{total:.1f}** | |", ""]
    if any(s["rc"] for s in r["steps"]):
        lines += ["**A step failed** (exit ≠ 0 above): its workflow stopped there; only the evaluation reports that this run's "
                  "steps wrote are shown.", ""]
    if r.get("notes"):
        lines += [r["notes"], ""]
    return "\n".join(lines)


if __name__ == "__main__":
    typer.run(main)
