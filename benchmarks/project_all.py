"""Collect the figures of one `spacy project run all` (default vars) into benchmarks/<output>.md / .json.

    python benchmarks/project_all.py --project .        # a project folder where `all` has run
    python benchmarks/project_all.py --project ../clone --start $(stat -c %Y ../clone/project.yml) --output project_all_s76

Reads kbs/mesh/build_report.json, kbs/mesh_final/build_report.json, kbs/mesh_names/build_report.json,
training/retriever/train_log.json, the calibrated pipeline's nil_calibration.json and metrics/bc5cdr_dev.json,
and records the machine it runs on (run it on the machine that ran `all`). With ``--start`` (the epoch second
`all` started), each step's wall time is the time between its outputs' modification times (weasel logs no times).
"""
import json
import time
from pathlib import Path
from typing import Optional

import typer

from _common import machine, machine_line

HERE = Path(__file__).resolve().parent


STEP_OUTPUTS = [("fetch_assets", "assets/mesh"), ("convert", "corpus/bc5cdr_dev.spacy"), ("build_kb", "kbs/mesh"),
                ("label_types", "training/label_types.json"), ("train", "training/retriever/best"), ("final_kb", "kbs/mesh_final"),
                ("build_names", "kbs/mesh_names"), ("aliases", "training/aliases.json"), ("pipeline", "training/pipeline"),
                ("calibrate", "training/pipeline_calibrated"), ("evaluate", "metrics/bc5cdr_dev.json"), ("package", "packages")]


def newest_mtime(path: Path) -> float:
    return max([path.stat().st_mtime] + [p.stat().st_mtime for p in path.rglob("*")] if path.is_dir() else [path.stat().st_mtime])


def main(project: Path = typer.Option(Path("."), help="Project folder where `spacy project run all` finished"),
         note: str = typer.Option("", help="A line about the machine / run conditions"),
         start: Optional[float] = typer.Option(None, help="epoch seconds when `spacy project run all` started"),
         output: str = typer.Option("project_all", help="Report name: benchmarks/OUTPUT.md and .json")):
    build = json.loads((project / "kbs/mesh/build_report.json").read_text())
    final = json.loads((project / "kbs/mesh_final/build_report.json").read_text())
    names = json.loads((project / "kbs/mesh_names/build_report.json").read_text())
    train = json.loads((project / "training/retriever/train_log.json").read_text())
    calib = json.loads((project / "training/pipeline_calibrated/nil_calibration.json").read_text())
    ev = json.loads((project / "metrics/bc5cdr_dev.json").read_text())
    r, nil, mach = ev["recall_in_kb"], ev["nil"], machine()

    def shown(x):
        return "n/a" if x is None else f"{x:.3f}"

    md = [
        "# `spacy project run all` from a clean clone: BC5CDR train → MeSH KB → trained retriever → calibrated pipeline",
        "",
        "Reproduce: `git clone … && cd … && pip install torch==2.13.0 && pip install -e .[test] && spacy project run all`, "
        "then `python benchmarks/project_all.py --project .`." + (f" {note}" if note else ""),
        "",
        machine_line(mach) + ".",
        "",
        "| step | figure |",
        "|---|---|",
        f"| build_kb (all {build['entities_total']:,} MeSH records, precision {build.get('precision')}) | {build['wall_s'] / 60:.1f} min, {build['entities_per_s']} entities/s |",
        f"| build_names (every MeSH name and synonym, {names['names']:,} rows) | {names['wall_s'] / 60:.1f} min, {names['names_per_s']} names/s |",
        f"| train (project.yml's train_overrides, {train['step']} steps) | {train['train_seconds'] / 60:.1f} min; "
        f"dev R@1 on the eval docs by step: {', '.join(str(round(h.get('dev_r1', h.get('dev', float('nan'))), 3)) for h in train['history'] if 'dev_r1' in h or 'dev' in h)} |",
        f"| final_kb (the KB by the final entity tower) | {final['wall_s'] / 60:.1f} min, {final['entities_encoded']:,} encoded"
        f"{' (reused from ' + final['reused_from'] + ': the tower did not change)' if final.get('reused_from') else ''} |",
        f"| calibrate (NIL threshold, best NIL F1 on dev) | threshold {calib.get('threshold', float('nan')):.3f} |",
        f"| evaluate: R@1 / R@64, dev mentions with gold id in KB ({ev['counts']['in_kb']}) | "
        f"{r['R@1']:.3f} / {r['R@64']:.3f} |",
        f"| evaluate: seen / unseen-entity R@1 | {ev['recall_seen']['R@1']:.3f} / {ev['recall_unseen']['R@1']:.3f} |",
        f"| evaluate: NIL P / R / F1, average precision | {shown(nil['p'])} / {shown(nil['r'])} / {shown(nil['f'])}, {shown(nil['average_precision'])} |",
        f"| evaluate: speed | {ev['mentions_per_s']} mentions/s |",
        "",
        "`final_kb` encodes the KB with the trained entity tower, reusing `build_kb`'s vectors when the tower did not "
        "change (the default recipe trains the mention tower only); `pipeline` assembles the trained encoder with it after "
        "checking their fingerprints match. `package` builds an installable package of the calibrated pipeline (`packages/`).",
        "",
    ]
    minutes: dict = {}
    if start is not None:
        md += ["Wall time of each step (from its outputs' modification times; `all` started at "
               f"{time.strftime('%H:%M:%S', time.localtime(start))}):", "", "| step | minutes |", "|---|---:|"]
        previous = start
        for step, made in STEP_OUTPUTS:
            done = newest_mtime(project / made)
            minutes[step] = round((done - previous) / 60, 2)
            md.append(f"| {step} | {minutes[step]:.1f} |")
            previous = done
        md += [f"| **total** | **{(previous - start) / 60:.1f}** |", ""]
    (HERE / f"{output}.md").write_text("\n".join(md))
    (HERE / f"{output}.json").write_text(json.dumps({"machine": mach, "build": build, "final_kb": final, "names": names, "train": {k: train[k] for k in ("step", "best", "best_step", "history", "train_seconds")},
                                                       "calibration": {k: v for k, v in calib.items() if k != "points"}, "evaluate": ev,
                                                       "minutes": minutes, "total_minutes": round(sum(minutes.values()), 1) if minutes else None}, indent=2))
    print("\n".join(md))


if __name__ == "__main__":
    typer.run(main)
