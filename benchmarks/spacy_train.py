"""`spacy train` against the project's own trainer, same budget (issue #16's acceptance run).

    python benchmarks/spacy_train.py --kb kbs/mesh --steps 300 [--lr 0.00005] [--work /tmp/spacy_train_bench]
    python benchmarks/spacy_train.py --kb kbs/mesh --steps 300 --loss ce_cosine --hard-fraction 0.5 \
        --out benchmarks/spacy_train_ce_hard

Both runs train the mention tower of the base encoder (all-MiniLM-L6-v2) on BC5CDR train against the
frozen entity vectors of a MeSH KB built with that encoder, with the same steps, batch size (32
mentions; spaCy's batches are whole documents, ~320 mentions, of which the linker trains on 32 drawn
at random: ``objective.max_mentions``), learning rate and linear warm-up/decay (25 %), loss (proxy,
α = 32, or ``--loss``), negatives (32, random or ``--hard-fraction`` hard), context (64 word pieces), weight decay 0.01 and gradient clip 1.0, each evaluating on 100 dev docs
every 100 steps:

* ``project``: ``python -m spacy_pel train configs/train_pb_random.cfg`` (its ``last/encoder``);
* ``spacy``: ``python -m spacy train configs/spacy_train.cfg`` (``init_nlp`` + ``train``, the two calls
  of spaCy's CLI, here in-process to read the linker's counts afterwards; its ``model-last``).

Then each final model is scored the same way: a pipeline with the retriever alone (no rules) over
the whole KB, every BC5CDR dev gold mention (:func:`spacy_pel.evaluation.linking.evaluate`, the
figures of ``python -m spacy_pel evaluate``), and the spaCy-trained pipeline once more by
``python -m spacy evaluate`` (its ``pel_r1`` and ``nel_micro_*``). Each phase runs in its own process.
Writes benchmarks/spacy_train.json and benchmarks/spacy_train.md.
"""
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from _common import machine

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

app = typer.Typer(add_completion=False)


def project_overrides(a: dict) -> dict:
    return {"paths.train": a["train"], "paths.dev": a["dev"], "paths.kb": a["kb"], "encoder.base": a["encoder"],
            "encoder.mention_max_length": a["context"], "training.max_steps": a["steps"],
            "training.batch_size": a["batch"], "training.lr": a["lr"], "training.warmup": 0.25,
            "training.weight_decay": 0.01, "training.grad_clip": 1.0, "training.eval_every": 100,
            "training.eval_docs": 100, "training.resume": False, "training.seed": 0, "training.device": "cpu",
            "loss.name": a.get("loss", "proxy"), "negatives.hard_fraction": a.get("hard_fraction", 0.0)}


def spacy_overrides(a: dict) -> dict:
    return {"paths.train": a["train"], "paths.dev": a["dev"], "paths.kb": a["kb"], "paths.encoder": a["encoder"],
            "components.pel_linker.context_window": a["context"], "components.pel_linker.device": "cpu",
            "training.max_steps": a["steps"] - 1,  # spaCy runs steps 0 … max_steps
            "components.pel_linker.objective.max_mentions": a["batch"], "training.batcher.size": 10 * a["batch"],
            "training.optimizer.learn_rate.initial_rate": a["lr"],
            "training.optimizer.learn_rate.total_steps": a["steps"],
            "training.optimizer.learn_rate.warmup_steps": round(0.25 * a["steps"]),
            "training.optimizer.L2": 0.01, "training.optimizer.grad_clip": 1.0,
            "training.eval_frequency": 100, "corpora.dev.limit": 100, "system.seed": 0,
            "components.pel_linker.objective.loss": a.get("loss", "proxy"),
            "components.pel_linker.objective.hard_fraction": a.get("hard_fraction", 0.0)}


def run_project(a: dict, out: Path) -> dict:
    from spacy_pel.training.retriever import train

    t0 = time.perf_counter()
    state = train(ROOT / "configs" / "train_pb_random.cfg", out, project_overrides(a), progress=False)
    return {"wall_s": round(time.perf_counter() - t0, 1), "steps": state["step"], "mentions_per_step": a["batch"],
            "history": state["history"], "model": str(out / "last" / "encoder")}


def run_spacy(a: dict, out: Path) -> dict:
    from spacy import util
    from spacy.training.initialize import init_nlp
    from spacy.training.loop import train

    from spacy_pel.pipeline.linker import find_linker

    t0 = time.perf_counter()
    config = util.load_config(ROOT / "configs" / "spacy_train.cfg", overrides=spacy_overrides(a), interpolate=False)
    nlp = init_nlp(config, use_gpu=-1)
    t1 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    train(nlp, out, use_gpu=-1, stdout=sys.stdout, stderr=sys.stderr)
    counts = find_linker(nlp)[1].updater.counts
    meta = json.loads((out / "model-last" / "meta.json").read_text())
    return {"wall_s": round(time.perf_counter() - t0, 1), "init_s": round(t1 - t0, 1), "steps": counts["steps"],
            "mentions_per_step": round(counts["mentions"] / max(1, counts["updates"]), 1), "counts": counts,
            "dev_during_training": meta.get("performance", {}), "model": str(out / "model-last")}


def run_eval(a: dict, which: str, model: str) -> dict:
    import spacy

    from spacy_pel.corpora import read_docbin
    from spacy_pel.evaluation.linking import evaluate
    from spacy_pel.pipeline.linker import find_linker

    if which == "project":  # the trained encoder in a pipeline with the retriever alone
        nlp = spacy.blank("en")
        linker = nlp.add_pipe("pel_linker", config={"kb": a["kb"], "encoder": model, "context_window": a["context"], "device": "cpu"})
    else:
        nlp = spacy.load(model)
        linker = find_linker(nlp)[1]
    docs = read_docbin(spacy.blank("en"), a["dev"])
    report = evaluate(linker, docs)
    return {"R@1": report["recall_in_kb"]["R@1"], "recall_in_kb": report["recall_in_kb"], "counts": report["counts"]}


def run_spacy_evaluate(a: dict, model: str, out: Path) -> dict:
    """``python -m spacy evaluate`` on the whole dev set, as a user runs it."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "spacy", "evaluate", model, a["dev"], "--output", str(out),
                           "--spans-key", "nel"], capture_output=True, text=True, check=True)
    scores = json.loads(out.read_text())
    keep = ("nel_micro_p", "nel_micro_r", "nel_micro_f", "pel_r1", "pel_r2", "pel_r4", "pel_r8", "pel_in_kb", "pel_mentions")
    return {"wall_s": round(time.perf_counter() - t0, 1), **{k: scores[k] for k in keep},
            "printed": [re.sub(r"\x1b\[[0-9;]*m", "", line).rstrip() for line in proc.stdout.splitlines() if "SPAN" in line]}


def phase(name: str, a: dict, work: Path) -> dict:
    """Run one phase in a fresh process (its own memory and threads); returns its JSON."""
    out = work / f"{name}.json"
    subprocess.run([sys.executable, __file__, "--phase", name, "--args", json.dumps(a), "--work", str(work)], check=True)
    return json.loads(out.read_text())


def describe(a: dict) -> str:
    loss = {"proxy": "proxy loss (α 32)", "ce_cosine": "CE on 20 × cosine", "ce": "CE (dot product)"}[a.get("loss", "proxy")]
    hard = a.get("hard_fraction", 0.0)
    return f"{loss}, 32 negatives ({'random' if not hard else f'{hard:.0%} hard from the KB index, the rest random'})"


def markdown(r: dict) -> str:
    a, p, s, pe, se, ev = r["settings"], r["project"], r["spacy"], r["project_eval"], r["spacy_eval"], r["spacy_evaluate"]
    diff = round(100 * (se["R@1"] - pe["R@1"]), 2)
    m = r["machine"]
    lines = [
        "# `spacy train` vs the project's trainer, same budget (issue #16)", "",
        f"Written by `benchmarks/spacy_train.py` on {m['cpu']} ({m['torch_threads']} torch threads, flags "
        f"{', '.join(m['flags']) or 'none'}; torch {m['torch']}), {r['date']}.", "",
        f"Mention tower of {a['encoder']} trained on BC5CDR train for **{a['steps']} steps**, batch {a['batch']} mentions, "
        f"lr {a['lr']} (linear warm-up 25 %, decay to 0), AdamW weight decay 0.01, clip 1.0, {describe(a)}, "
        f"context {a['context']} word pieces, entity tower frozen: the KB's stored vectors "
        f"({a['kb']}, all of MeSH) are the entity side. Dev R@1: the final model, retriever alone (no rules) over "
        f"the whole KB, every BC5CDR dev gold mention whose id is in the KB ({pe['counts']['in_kb']}), "
        "`spacy_pel.evaluation.linking.evaluate` for both.", "",
        "| run | command | steps | mentions / step | wall (s) | dev R@1 | R@8 |", "|---|---|---:|---:|---:|---:|---:|",
        f"| project trainer | `python -m spacy_pel train configs/train_pb_random.cfg` | {p['steps']} | {p['mentions_per_step']} | "
        f"{p['wall_s']} | {pe['R@1']:.4f} | {pe['recall_in_kb']['R@8']:.4f} |",
        f"| spaCy | `python -m spacy train configs/spacy_train.cfg` | {s['steps']} | {s['mentions_per_step']} | "
        f"{s['wall_s']} | {se['R@1']:.4f} | {se['recall_in_kb']['R@8']:.4f} |", "",
        f"Difference (spaCy − project): **{diff:+.2f} pt** R@1 (acceptance: within 1 pt: "
        f"{'yes' if abs(diff) <= 1 else 'NO'}). Base encoder before training: R@1 {r['base_eval']['R@1']:.4f}.", "",
        "Wall times include loading the KB and the evaluations on 100 dev docs every 100 steps "
        f"(spaCy's `init_nlp`: {s['init_s']} s). The project trainer's batches are 32 mentions drawn "
        "across documents; spaCy's are whole documents, about 320 gold mentions (16 abstracts, "
        "`spacy_pel.batch_by_mentions.v1`), of which the linker trains on 32 drawn at random "
        "(`objective.max_mentions`; mentions per step above counts those). "
        "thinc's `warmup_linear.v1` starts at 0 where the project's schedule starts at 1/warm-up steps: "
        "the same curve one step later.", "",
        "## `spacy evaluate` on the spaCy-trained pipeline (whole BC5CDR dev)", "",
        f"`python -m spacy evaluate MODEL corpus/bc5cdr_dev.spacy --spans-key nel --output scores.json` "
        f"({ev['wall_s']} s): pel_r1 {ev['pel_r1']:.4f} over {ev['pel_in_kb']} in-KB mentions "
        f"(`spacy_pel` evaluate: {se['R@1']:.4f} over {se['counts']['in_kb']}); nel_micro_p / r / f "
        f"{ev['nel_micro_p']:.4f} / {ev['nel_micro_r']:.4f} / {ev['nel_micro_f']:.4f} (Scorer.score_links: "
        "`doc.ents` only, ids compared as strings, so composite mentions and ids absent from the KB count "
        "as errors). Printed:", "", "```", *[re.sub(r"\x1b\[[0-9;]*m", "", x).rstrip() for x in ev["printed"]], "```", "",
    ]
    return "\n".join(lines)


@app.command()
def main(
    kb: str = typer.Option("kbs/mesh", help="MeSH KB built with the base encoder"),
    steps: int = typer.Option(300),
    batch: int = typer.Option(32),
    lr: float = typer.Option(0.00005),
    loss: str = typer.Option("proxy", help="proxy, ce_cosine or ce (the same for both runs)"),
    hard_fraction: float = typer.Option(0.0, help="share of hard negatives (FAISS over the KB's vectors)"),
    context: int = typer.Option(64),
    encoder: str = typer.Option("all-MiniLM-L6-v2"),
    train: str = typer.Option("corpus/bc5cdr_train.spacy"),
    dev: str = typer.Option("corpus/bc5cdr_dev.spacy"),
    work: Path = typer.Option(Path("/tmp/spacy_train_bench")),
    out: Path = typer.Option(HERE / "spacy_train"),
    phase_name: Optional[str] = typer.Option(None, "--phase"),
    args: Optional[str] = typer.Option(None, "--args"),
):
    work.mkdir(parents=True, exist_ok=True)
    if phase_name:
        a = json.loads(args)
        if phase_name == "project":
            result = run_project(a, work / "project")
        elif phase_name == "spacy":
            result = run_spacy(a, work / "spacy")
        elif phase_name == "spacy_evaluate":
            result = run_spacy_evaluate(a, a["model"], work / "spacy_evaluate_scores.json")
        else:  # base_eval, project_eval, spacy_eval
            result = run_eval(a, *a["which"])
        (work / f"{phase_name}.json").write_text(json.dumps(result, indent=2))
        return
    a = {"kb": kb, "steps": steps, "batch": batch, "lr": lr, "context": context, "encoder": encoder, "train": train, "dev": dev,
         "loss": loss, "hard_fraction": hard_fraction}
    r = {"settings": a, "machine": machine(), "date": time.strftime("%Y-%m-%d")}
    r["project"] = phase("project", a, work)
    r["spacy"] = phase("spacy", a, work)
    r["project_eval"] = phase("project_eval", {**a, "which": ["project", r["project"]["model"]]}, work)
    r["spacy_eval"] = phase("spacy_eval", {**a, "which": ["spacy", r["spacy"]["model"]]}, work)
    r["base_eval"] = phase("base_eval", {**a, "which": ["project", encoder]}, work)
    r["spacy_evaluate"] = phase("spacy_evaluate", {**a, "model": r["spacy"]["model"]}, work)
    out.with_suffix(".json").write_text(json.dumps(r, indent=2))
    out.with_suffix(".md").write_text(markdown(r))
    typer.echo(markdown(r))


if __name__ == "__main__":
    app()
