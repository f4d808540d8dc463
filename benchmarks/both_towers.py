"""Issue 28, item 2 on a CPU: both towers trained from BC5CDR mentions, starting from base MiniLM.

The chain, each step skipped when its output exists (a cut run resumes), timed, written to
benchmarks/both_towers.{json,md}:

1. ``train``     configs/train_both.cfg from base MiniLM (not the adapted encoder: benchmarks/encoder_adapt.md
                 found it below base on mentions in context): both towers learn, shared negatives (every
                 mention of a batch scored against the batch's positives and 4 sampled rows per mention, each
                 row encoded once a step with gradient), half of them hard, mined from a pool of 20,000 MeSH
                 entities re-encoded by the training entity tower every 100 steps (the KB read from its file,
                 no vectors), entity inputs 32 word pieces, CE on 20 × cosine, lr 5e-5, bf16 autocast where the
                 CPU has it, one epoch (286 steps) or 20 minutes -- the budget of ``ce_mixed50_1ep`` in
                 benchmarks/retriever.md (mention tower only);
2. ``kb``        all of MeSH encoded once by the final entity tower (``build-kb --encoder …/best``);
3. ``names`` / ``pipeline``  the name rows by the same tower and the pipeline as ``all`` assembles it.

Figures: the retriever alone (no rules, no name rows) on BC5CDR dev gold mentions vs all MeSH, context 64,
beside the mention-tower-only rows of benchmarks/retriever.md; the pipeline's come from
``benchmarks/accuracy.py --pipeline training/pipeline_both --output benchmarks/accuracy_both``.

    python benchmarks/both_towers.py                         # every step not yet done, then the report
    python benchmarks/both_towers.py --steps train --steps kb --steps alone --steps report
    python benchmarks/both_towers.py --run lr01 --train-overrides "--training.epochs 1 --training.entity_lr_scale 0.1"
                                                             # a variant: its own outputs and report
"""
from __future__ import annotations

import json
import time
from typing import List

import typer

from _common import lscpu_model, machine, machine_line
from encoder_adapt import BEFORE, HERE, MESH, PY, ROOT, retriever_alone, retriever_table, run_step, step_times


def chain(run: str, train: str = "corpus/bc5cdr_train.spacy") -> dict:
    """The steps of run ``run`` (its outputs: training/retriever_<run>, kbs/mesh_<run>, …): (output, command).
    ``train``: the training corpus (another than BC5CDR's gets its own alias table, training/aliases_<run>.json)."""
    enc, kb, pipe = f"training/retriever_{run}", f"kbs/mesh_{run}", f"training/pipeline_{run}"
    default = train == "corpus/bc5cdr_train.spacy"
    aliases = "training/aliases.json" if default else f"training/aliases_{run}.json"
    paths = "" if default else f" --paths.train {train}"
    return {
        "train": (f"{enc}/best", f"{PY} -m spacy_pel train configs/train_both.cfg --output {enc} --encoder.base all-MiniLM-L6-v2 "
                  f"--paths.kb {MESH} --paths.kb_format mesh --training.patience 0{paths} {{train_overrides}}"),
        "kb": (kb, f"{PY} -m spacy_pel build-kb --kb {MESH} --format mesh --encoder {enc}/best --output {kb}"),
        "names": (f"{kb}_names", f"{PY} -m spacy_pel build-names {kb} --output {kb}_names"),
        "aliases": (aliases, f"{PY} -m spacy_pel aliases {train} --output {aliases}"),
        "pipeline": (pipe, f"{PY} -m spacy assemble configs/linker_rules.cfg {pipe} --paths.kb {kb} --paths.encoder {enc}/best "
                           f"--paths.aliases {aliases} --paths.names {kb}_names --components.pel_linker.context_window 64"),
    }


STEPS = chain("both")
TRAIN_OVERRIDES = "--training.epochs 1 --training.max_minutes 20"
# benchmarks/retriever.md, same evaluation: the mention tower alone, base entity tower frozen
MENTION_ONLY = {"mention tower only, CE mixed-50%, 1 epoch (ce_mixed50_1ep)": {"R@1": 0.755, "unseen": 0.615, "seen": 0.791, "R@64": 0.909}}
# session 14's run of this script with the default TRAIN_OVERRIDES (1 epoch, 286 steps, best at step 200), and
# session 15's, a 3-epoch schedule stopped at step 400 (best at 200): benchmarks/both_towers.md
ONE_EPOCH = {"both towers, 1 epoch (session 14)": {"R@1": 0.791, "unseen": 0.651, "seen": 0.827, "R@64": 0.932}}
THREE_EPOCHS = {"both towers, 3-epoch schedule, best at step 200 (session 15)": {"R@1": 0.768, "unseen": 0.635, "seen": 0.803, "R@64": 0.928}}


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = ["# Issue 28, item 2: both towers trained from mentions on 2 CPU cores", "",
             machine_line(m) + "; every step ran alone unless the notes below say otherwise.", "",
             "Reproduce: `python benchmarks/both_towers.py" + (f" --run {r['run']} --train-overrides \"{r['train_overrides']}\""
                                                               if r.get("run", "both") != "both" else "") +
             "` (the chain and its settings are in its docstring).", ""]
    t = r.get("train_log")
    if t:
        lines += [f"Training: {t['step']} steps in {t['train_seconds'] / 60:.1f} min ({t['train_seconds'] / max(t['step'], 1):.2f} s "
                  f"a step); best dev R@1 during training (100 dev docs vs their gold entities + 5,000 sampled rows) at step "
                  f"{t['best_step']}: " + ", ".join(f"step {h['step']}: {h['dev_r1']:.3f}" for h in t["history"]), ""]
    earlier = ONE_EPOCH if r.get("run", "both") == "both" else {**ONE_EPOCH, **THREE_EPOCHS}
    rows = list(BEFORE.items()) + list(MENTION_ONLY.items()) + list(earlier.items())
    if "alone_both" in r:
        steps = f"{t['step']} steps, best at {t['best_step']}" if t else "this run"
        extra = f"; {r['train_overrides']}" if r.get("run", "both") != "both" else ""
        rows.append((f"both towers ({steps}{extra}; this run)", r["alone_both"]))
    lines += retriever_table(rows, "rows other than this run's") + step_times(r)
    return "\n".join(lines) + "\n"


def main(steps: List[str] = typer.Option(list(STEPS) + ["alone", "report"], help="What to do"),
         train_overrides: str = typer.Option(TRAIN_OVERRIDES), notes: str = typer.Option(""),
         run: str = typer.Option("both", help="A run's name: its outputs are training/retriever_RUN, kbs/mesh_RUN …, its "
                                              "report benchmarks/both_towers_RUN.{json,md} (both: both_towers.{json,md})")):
    run_steps = chain(run)
    out = HERE / ("both_towers.json" if run == "both" else f"both_towers_{run}.json")
    report = json.loads(out.read_text()) if out.exists() else {}
    report["machine"] = {**machine(), "lscpu_model": lscpu_model()}
    if run != "both":
        report.update({"run": run, "train_overrides": train_overrides})
    if notes:
        report["notes"] = notes

    def save():
        out.write_text(json.dumps(report, indent=2), encoding="utf8")
        out.with_suffix(".md").write_text(markdown(report), encoding="utf8")

    for name in run_steps:
        if name in steps:
            run_step(name, report, steps=run_steps, train_overrides=train_overrides)
            save()
    log = ROOT / "training" / f"retriever_{run}" / "train_log.json"
    if log.exists():
        report["train_log"] = json.loads(log.read_text())
    if "alone" in steps and (ROOT / "kbs" / f"mesh_{run}").exists():
        t0 = time.perf_counter()
        report["alone_both"] = retriever_alone(f"training/retriever_{run}/best", f"kbs/mesh_{run}")
        report["alone_both"]["eval_minutes"] = round((time.perf_counter() - t0) / 60, 1)
    save()


if __name__ == "__main__":
    typer.run(main)
