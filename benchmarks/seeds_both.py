"""Issue 28, item 3: the seeds' losses re-tested with BOTH towers trained (benchmarks/seeds.md froze the
entity tower): proxy loss (Eq. 3) with random negatives vs CE with mixed-50% hard negatives at the same
budget, then FGSM on the better of the two (on each mention's first shared row), then the proxy loss with CE's
mixed-50% negatives (is the gap the loss or the negatives?).

Every run trains configs/train_both.cfg from base MiniLM for the retriever benchmark's budget (``_common.BUDGET``:
120 steps × 32 mentions, lr 5e-5, 25% warm-up, context 64), both towers learning, shared negatives (4 a
mention, encoded once a step with gradient), hard ones (where the run has them) from a 20,000-entity pool
re-encoded by the training entity tower every 100 steps. Only the loss, the negatives' hard fraction and
FGSM differ between runs.

Evaluation, the same for every run and cheap enough for a CPU (no 354k-entity KB encode per run): every
BC5CDR dev gold mention whose entity is in MeSH, encoded by the run's mention tower, against an entity table
encoded by the run's entity tower: the dev gold entities plus 50,000 other MeSH records drawn at random
(seed 0, the same for every run). R@1 / R@64, and R@1 over mentions of entities absent from BC5CDR train
(unseen). Writes benchmarks/seeds_both.{json,md}; a run whose training folder has ``best`` is not re-trained.

    python benchmarks/seeds_both.py                   # every run not yet done, then the report
    python benchmarks/seeds_both.py --only ce_mixed50
"""
from __future__ import annotations

import json
from typing import Dict

import typer

from _common import BUDGET, HERE, ROOT, SHARED, lscpu_model, machine, machine_line, run_timed
from subset_eval import SAMPLE, SubsetEval

RUNS_DIR = ROOT / "training" / "seeds_both"
PB_RANDOM = {"loss.name": "proxy", "negatives.hard_fraction": 0.0}
CE_MIXED = {"loss.name": "ce_cosine", "negatives.hard_fraction": 0.5}
FGSM = {"fgsm.enabled": "true", "fgsm.negatives": 1, "fgsm.mentions": 8}
RUNS: Dict[str, object] = {"pb_random": PB_RANDOM, "ce_mixed50": CE_MIXED, "fgsm_on_better": "fgsm",
                           # the same loss with CE's hard negatives: which of the two makes the gap
                           "pb_mixed50": {"loss.name": "proxy", "negatives.hard_fraction": 0.5}}
BUDGET_OVERRIDES = {k: v for k, v in BUDGET.items() if k != "negatives.count"}  # shared negatives: 4 a mention


def overrides(run: str, results: dict) -> dict:
    spec = RUNS[run]
    if spec == "fgsm":
        better = max(("pb_random", "ce_mixed50"), key=lambda r: results[r]["R@1"])
        return {**RUNS[better], **FGSM, "_better": better}
    return dict(spec)


def train(run: str, settings: dict) -> dict:
    out = RUNS_DIR / run
    args = [f"--{k} {v}" for k, v in {**BUDGET_OVERRIDES, **settings}.items() if not k.startswith("_")]
    command = (f"python -m spacy_pel train configs/train_both.cfg --output {out.relative_to(ROOT)} --encoder.base all-MiniLM-L6-v2 "
               f"--paths.kb {SHARED / 'mesh'} --paths.kb_format mesh --training.patience 0 " + " ".join(args))
    minutes = 0.0 if (out / "best").exists() else run_timed(command)
    log = json.loads((out / "train_log.json").read_text())
    return {"command": command, "minutes": minutes,
            "step_seconds": round(log["train_seconds"] / max(log["step"], 1), 2), "best_step": log.get("best_step")}


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = ["# Issue 28, item 3: proxy loss vs CE and FGSM with both towers trained", "",
             machine_line(m) + "; every run alone.", "",
             "Reproduce: `python benchmarks/seeds_both.py` (the budget and the evaluation are in its docstring). Same budget "
             "for every run: " + ", ".join(f"{k} {v}" for k, v in BUDGET_OVERRIDES.items()) + "; both towers learn.", "",
             f"Evaluation: BC5CDR dev gold mentions (in MeSH) vs the dev gold entities + {SAMPLE:,} random MeSH records, all "
             "encoded by the run's own towers (not all of MeSH: that would cost a 12-minute encode per run).", "",
             "| run | loss | hard negatives | FGSM | steps | R@1 | R@64 | unseen R@1 | seen R@1 | s / step | best step |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, res in r["runs"].items():
        s = res["settings"]
        lines.append(f"| {name} | {s['loss.name']} | {s['negatives.hard_fraction']} | {'yes' if 'fgsm.enabled' in s else 'no'} | "
                     f"{s.get('training.max_steps', BUDGET['training.max_steps'])} | "
                     f"{res['R@1']:.4f} | {res['R@64']:.4f} | {res['unseen']:.4f} | {res['seen']:.4f} | "
                     f"{res['train']['step_seconds']} | {res['train']['best_step']} |")
    runs = r["runs"]
    if {"pb_random", "ce_mixed50"} <= set(runs):
        gap = (runs["pb_random"]["R@1"] - runs["ce_mixed50"]["R@1"]) * 100
        lines += ["", f"Pb random vs CE mixed-50%: {gap:+.1f} pt R@1 (target: within 2 pt). With a frozen entity tower "
                  "(benchmarks/seeds.md, all of MeSH): 0.464 (batch-centred, δ 0.3) vs 0.666."]
    if "pb_mixed50" in runs and "ce_mixed50" in runs:
        lines += ["", f"The proxy loss with CE's mixed-50% negatives: R@1 {runs['pb_mixed50']['R@1']:.4f}, "
                  f"{(runs['pb_mixed50']['R@1'] - runs['ce_mixed50']['R@1']) * 100:+.1f} pt vs CE mixed-50%, "
                  f"{(runs['pb_mixed50']['R@1'] - runs['pb_random']['R@1']) * 100:+.1f} pt vs Pb random."]
    if "fgsm_on_better" in runs:
        better = runs["fgsm_on_better"]["settings"]["_better"]
        delta = (runs["fgsm_on_better"]["R@1"] - runs[better]["R@1"]) * 100
        lines += ["", f"FGSM on the better loss ({better}): {delta:+.1f} pt R@1 (target ≥ 0; frozen tower: −2.8 pt)."]
    if r.get("notes"):
        lines += ["", r["notes"]]
    return "\n".join(lines) + "\n"


def main(only: str = typer.Option("", help="comma-separated runs (default: all, in order)"), notes: str = typer.Option("")):
    out = HERE / "seeds_both.json"
    report = json.loads(out.read_text()) if out.exists() else {"runs": {}}
    report["machine"] = {**machine(), "lscpu_model": lscpu_model()}
    if notes:
        report["notes"] = notes
    dev = None
    for run in (only.split(",") if only else RUNS):
        if run in report["runs"]:
            continue
        settings = overrides(run, report["runs"])
        trained = train(run, settings)
        dev = dev or SubsetEval()
        report["runs"][run] = {"settings": settings, "train": trained, **dev.evaluate(RUNS_DIR / run / "best")}
        out.write_text(json.dumps(report, indent=2), encoding="utf8")
        out.with_suffix(".md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
