"""Issue 28: a trained pipeline linking a KB it was not trained on, its encoder taught that KB's synonyms
first or not (the ``transfer`` workflow: ``adapt --encoder PIPELINE/pel_linker/encoder`` → ``build-kb``
→ ``build-names`` → ``retarget`` → ``evaluate``).

``run`` adds one case (``--minutes 0``: no adapt, the KB encoded by the pipeline's own encoder); every
step whose output exists in ``--work`` is reused (delete it to measure again). ``report`` rewrites the
markdown from the JSON.

    python benchmarks/retarget.py run --case "BC5CDR pipeline → MEDIC, no adapt" --pipeline training/pipeline_calibrated \\
        --kb-source ../shared/data/ncbi-disease/medic_06Jul2012.txt --kb-format medic --dev corpus/ncbi_dev.spacy \\
        --train corpus/bc5cdr_train.spacy --work training/bench/retarget/plain --minutes 0
    python benchmarks/retarget.py run --case "BC5CDR pipeline → MEDIC, adapted 10 min" … --work training/bench/retarget/a10 \\
        --minutes 10 --options " --synonyms.steps 200 --training.lr 0.00002"

(``--options`` takes any adapt setting: `` --paths.train corpus/bc5cdr_train.spacy --synonyms.replay 0.25
--training.epochs 0`` replays the pipeline's training mentions, as the workflow does.)
"""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import typer

from _common import HERE, invocation, lscpu_model, machine, machine_line, run_timed

OUTPUT = HERE / "retarget"
app = typer.Typer(add_completion=False)


def step(minutes: dict, name: str, output: Path, command: str) -> None:
    """Run ``command`` unless ``output`` exists; its minutes go to ``minutes[name]`` (None: reused)."""
    minutes.setdefault(name, None)
    if not output.exists():
        minutes[name] = run_timed(command)


@app.command()
def run(case: str = typer.Option(...), pipeline: Path = typer.Option(..., help="the trained pipeline"),
        kb_source: Path = typer.Option(..., help="the other KB's file"), kb_format: str = typer.Option(...),
        dev: Path = typer.Option(..., help="a dev corpus linked to that KB"),
        train: Path = typer.Option(..., help="the pipeline's training corpus (seen / unseen)"),
        work: Path = typer.Option(..., help="folder of this case's encoder, KB, name rows and pipeline"),
        minutes: float = typer.Option(10.0, help="adapt's time budget (0: no adapt)"),
        options: str = typer.Option("", help="more adapt options, after a space"),
        encoder: str = typer.Option("", help="an encoder made elsewhere (e.g. benchmarks/task_vectors.py), instead of "
                                             "the pipeline's own or adapt's; --minutes is then ignored"),
        output: Path = typer.Option(OUTPUT, help="report path without suffix")):
    work = work.resolve()
    times: dict = {}
    if encoder:
        minutes, options = 0.0, f" (encoder {encoder})"
    else:
        encoder = f"{pipeline}/pel_linker/encoder"
    if minutes > 0:
        encoder = str(work / "encoder")
        step(times, "adapt", work / "encoder", f"python -m spacy_pel adapt {shlex.quote(str(kb_source))} --format {kb_format} "
             f"-o {encoder} --encoder {pipeline}/pel_linker/encoder --max-minutes {minutes}{options}")
    step(times, "build-kb", work / "kb", f"python -m spacy_pel build-kb --kb {shlex.quote(str(kb_source))} --format {kb_format} "
         f"--encoder {encoder} --output {work / 'kb'}")
    step(times, "build-names", work / "names", f"python -m spacy_pel build-names {work / 'kb'} --output {work / 'names'}")
    step(times, "retarget", work / "pipeline", f"python -m spacy_pel retarget {pipeline} --kb {work / 'kb'} "
         f"--names {work / 'names'} -o {work / 'pipeline'}")
    metrics = work / "dev.json"
    run_timed(f"python -m spacy_pel evaluate {dev} --pipeline {work / 'pipeline'} --train {train} --output {metrics}")
    m = json.loads(metrics.read_text())
    adapt_log = work / "encoder" / "adapt_log.json"
    entry = {"case": case, "command": invocation(), "minutes": times, "adapt_minutes": minutes, "options": options,
             "R@1": m["recall_in_kb"]["R@1"], "unseen": m["recall_unseen"].get("R@1"), "seen": m["recall_seen"].get("R@1"),
             "R@64": m["recall_in_kb"]["R@64"], "in_kb": m["counts"]["in_kb"], "unseen_n": m["counts"].get("unseen"),
             "adapt": {k: v for k, v in json.loads(adapt_log.read_text()).items() if k in ("step", "best", "best_step", "history")}
             if adapt_log.exists() else None}
    path = output.with_suffix(".json")
    old = json.loads(path.read_text()) if path.exists() else {}
    result = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "notes": old.get("notes", ""),
              "cases": [c for c in old.get("cases", []) if c["case"] != case] + [entry]}
    path.write_text(json.dumps(result, indent=2), encoding="utf8")
    output.with_suffix(".md").write_text(markdown(result), encoding="utf8")


@app.command()
def report(output: Path = typer.Option(OUTPUT, help="report path without suffix")):
    output.with_suffix(".md").write_text(markdown(json.loads(output.with_suffix(".json").read_text())), encoding="utf8")


def markdown(r: dict) -> str:
    lines = ["# A trained pipeline on a KB it was not trained on: retarget, with the encoder taught that KB first or not", "",
             machine_line(r["machine"]) + ".", "",
             "Gold mentions of the dev corpus, the pipeline's own rules and maps; unseen: gold entity absent from the pipeline's "
             "training corpus. Adapt: KB self-alignment continuing the pipeline's trained retriever (`adapt --encoder "
             "PIPELINE/pel_linker/encoder`, its input lengths kept); then `build-kb`, `build-names` and `retarget` with that encoder.", "",
             "| case | adapt | R@1 | unseen R@1 | seen R@1 | R@64 | adapt steps (best) | minutes: adapt / build-kb / build-names |",
             "|---|---|---:|---:|---:|---:|---|---|"]
    for c in r["cases"]:
        a = c.get("adapt") or {}
        t = c["minutes"]
        cell = lambda k: "–" if k not in t else "reused" if t[k] is None else f"{t[k]}"  # noqa: E731
        lines.append(f"| {c['case']} | {c['adapt_minutes']:g} min{c['options']} | {c['R@1']:.4f} | {c['unseen']:.4f} "
                     f"({c['unseen_n']}) | {c['seen']:.4f} | {c['R@64']:.4f} | {a.get('step', '–')} ({a.get('best_step', '–')}) | "
                     f"{cell('adapt')} / {cell('build-kb')} / {cell('build-names')} |")
    lines += ["", "Commands:", ""] + [f"- {c['case']}: `{c['command']}`" for c in r["cases"]]
    if r.get("notes"):
        lines += ["", r["notes"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    app()
