"""Searching a label's mentions among the entities of its types only (``spacy_pel.rules.label_types.v1``,
``search_share``): the same trained pipelines with the whole KB searched (``search_share = 0``: the code
before) and with the default (0.5: BC5CDR's ``Disease`` mentions searched among MeSH's disease rows,
``Chemical`` — 73% of MeSH — still the whole KB).

For each setting, twins of the given pipelines are made (hard links to their files; only ``config.cfg``
is rewritten, with the setting in every ``label_types`` rule) and measured with the project's own
benchmarks: ``accuracy.py`` (BC5CDR dev R@1 / unseen, OKB C10 NIL on held-out docs, NCBI transfer; its
NIL decisions are fitted under each setting), ``evaluate --e2e`` (strict F1 from raw text; the e2e
pipeline's NIL threshold as calibrated with the whole KB searched) and ``user_speed.py`` (``nlp.pipe``
over 480 dev docs, a fresh process, the first pass; the settings interleaved, ``--rounds`` each).
Each step's output is kept in ``--work`` and reused when the script is run again.

    python benchmarks/label_search.py --pipeline training/pipeline --calibrated training/pipeline_calibrated \\
        --e2e training/pipeline_e2e_calibrated --okb-kb OKB/kb --okb-dev OKB/bc5cdr_dev.spacy
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import spacy
import typer

from _common import HERE, ROOT, invocation, lscpu_model, machine, machine_line, median_cell, report_footer

SETTINGS = {"whole KB": 0.0, "among the label's types": 0.5}  # search_share
RULE = "spacy_pel.rules.label_types.v1"
app = typer.Typer(add_completion=False)


def twin(pipeline: Path, share: float, out: Path) -> Path:
    """``pipeline`` with ``search_share = share`` in its label_types rules: hard links to its files, a new config."""
    if not (out / "config.cfg").exists():
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(pipeline, tmp, copy_function=os.link)
        config = spacy.util.load_config(pipeline / "config.cfg")
        rules = [rule for comp in config["components"].values() for rule in comp.get("rules", {}).values()
                 if rule.get("@misc") == RULE]
        if not rules:
            raise typer.BadParameter(f"{pipeline} has no {RULE} rule")
        for rule in rules:
            rule["search_share"] = share
        (tmp / "config.cfg").unlink()
        config.to_disk(tmp / "config.cfg")
        tmp.rename(out)
    return out


def run(args: List[str], output: Path) -> dict:
    """Run a benchmark or CLI (``sys.executable``) unless ``output`` exists; its JSON."""
    if not output.exists():
        subprocess.run([sys.executable, *args], check=True, cwd=ROOT)
    return json.loads(output.read_text(encoding="utf8"))


def okb_row(accuracy: dict) -> dict:
    return accuracy["nil"]["okb"]["NIL classifier with pairwise terms, ≤ 1 pt R@1 loss"]["held_out"]


@app.command()
def main(pipeline: Path = typer.Option(..., help="the `all` pipeline before calibration (training/pipeline)"),
         calibrated: Path = typer.Option(..., help="its calibrated pipeline (training/pipeline_calibrated)"),
         e2e: Path = typer.Option(..., help="the calibrated end-to-end pipeline (training/pipeline_e2e_calibrated)"),
         okb_kb: Path = typer.Option(..., help="OKB KB (python -m spacy_pel okb --kb kbs/mesh_final --remove C10 …)"),
         okb_dev: Path = typer.Option(..., help="the OKB's relabelled dev corpus"),
         dev: Path = typer.Option(ROOT / "corpus" / "bc5cdr_dev.spacy"),
         train: Path = typer.Option(ROOT / "corpus" / "bc5cdr_train.spacy"),
         rounds: int = typer.Option(5, help="fresh-process speed runs of each setting (interleaved)"),
         work: Path = typer.Option(Path("/tmp/pel_label_search")),
         output: Path = typer.Option(HERE / "label_search", help="report path without suffix"),
         notes: str = typer.Option("")):
    """Measure both settings and write the report."""
    work.mkdir(parents=True, exist_ok=True)
    results: Dict[str, dict] = {}
    for name, share in SETTINGS.items():
        folder = work / f"share_{share}"
        base, cal, e2e_twin = (twin(p, share, folder / p.name) for p in (pipeline, calibrated, e2e))
        acc = folder / "accuracy"
        accuracy = run([str(HERE / "accuracy.py"), "--pipeline", str(base), "--okb-kb", str(okb_kb), "--okb-dev", str(okb_dev),
                        "--dev", str(dev), "--train", str(train), "--work", str(folder / "acc"), "--output", str(acc)],
                       acc.with_suffix(".json"))
        e2e_json = folder / "e2e.json"
        end_to_end = run(["-m", "spacy_pel.evaluate", str(dev), "--pipeline", str(e2e_twin), "--e2e", "--output", str(e2e_json)],
                         e2e_json)
        results[name] = {"search_share": share, "pipelines": [str(base), str(cal), str(e2e_twin)],
                         "accuracy": {k: accuracy[k] for k in ("dev", "ncbi")} | {"okb": okb_row(accuracy)},
                         "e2e": end_to_end, "speed": []}
    speed_out = work / "user_speed"
    if not speed_out.with_suffix(".json").exists():
        for i in range(rounds):
            for name, share in SETTINGS.items():
                subprocess.run([sys.executable, str(HERE / "user_speed.py"), "run", "--pipeline",
                                str(work / f"share_{share}" / calibrated.name), "--n-process", "1", "--dev", str(dev),
                                "--label", name, "--output", str(speed_out), *(["--append"] if i or share else [])],
                               check=True, cwd=ROOT)
    for run_ in json.loads(speed_out.with_suffix(".json").read_text(encoding="utf8"))["runs"]:
        results[run_["settings"][0]]["speed"].append(run_)
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "notes": notes,
              "settings": results}
    output.with_suffix(".json").write_text(json.dumps(report, indent=2), encoding="utf8")
    output.with_suffix(".md").write_text(markdown(report), encoding="utf8")


def markdown(r: dict) -> str:
    lines = ["# Searching a label's mentions among its types (`label_types` rule, `search_share`)", "",
             machine_line(r["machine"]) + ".", "", __doc__.split("\n\n")[1].replace("\n", " "), "",
             "| setting | BC5CDR dev R@1 / unseen / R@64 | OKB C10 NIL P / R / F1, held out (in-KB R@1 without → with NIL) | "
             "NCBI transfer R@1 | e2e strict P / R / F1 | mentions/s, fresh process (median; runs) |",
             "|---|---|---|---|---|---|"]
    for name, s in r["settings"].items():
        dev, okb, ncbi, e2e = s["accuracy"]["dev"], s["accuracy"]["okb"], s["accuracy"]["ncbi"], s["e2e"]["strict"]
        speeds = [x["mentions_per_s"] for x in s["speed"]]
        lines.append(
            f"| {name} (`search_share {s['search_share']}`) | {dev['recall_in_kb']['R@1']:.4f} / {dev['recall_unseen']['R@1']:.4f} / "
            f"{dev['recall_in_kb']['R@64']:.4f} | {okb['nil']['p']:.3f} / {okb['nil']['r']:.3f} / **{okb['nil']['f']:.3f}** "
            f"({okb['in_kb_R@1_without_nil']:.3f} → {okb['in_kb_R@1_with_nil']:.3f}) | {ncbi['recall_in_kb']['R@1']:.4f} | "
            f"{e2e['p']:.3f} / {e2e['r']:.3f} / **{e2e['f']:.3f}** | {median_cell(speeds)} |")
    return "\n".join(lines + report_footer(r))


if __name__ == "__main__":
    app()
