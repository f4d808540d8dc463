"""Retriever-training benchmark (issue 3) on BC5CDR dev vs the full MeSH KB.

    python benchmarks/retriever.py            # resumable: finished runs are kept, a cut run resumes

Every run trains from all-MiniLM-L6-v2 under the same budget (BUDGET below) with
configs/train_pb_random.cfg plus the run's overrides, then links all BC5CDR dev gold mentions against
all 354,068 MeSH records. NIL: the threshold is calibrated (best NIL F1) on dev documents 0-249 and
NIL P/R/F1 is reported on documents 250-499; NIL average precision is over all of dev.
Writes benchmarks/retriever/<run>.json and benchmarks/retriever.md.
"""
import json
import shutil
import time
from pathlib import Path

import numpy as np
import spacy
import typer

from _common import BUDGET
from _common import RETRIEVER_CONFIG as CONFIG
from spacy_pel.corpora import NIL, corpus_ids, gold_spans, read_docbin
from spacy_pel.evaluation.linking import mention_table, metrics
from spacy_pel.evaluation.metrics import prf
from spacy_pel.evaluation.nil import nil_curve
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.retriever import train

HERE = Path(__file__).resolve().parent
SYN_STEPS = 120
RUNS = {
    "untrained": None,
    "pb_random": {},
    "pb_mixed50": {"negatives.hard_fraction": 0.5},
    "ce_random": {"loss.name": "ce"},
    "ce_mixed50": {"loss.name": "ce", "negatives.hard_fraction": 0.5},
    "pb_mixed50_fgsm": {"negatives.hard_fraction": 0.5, "fgsm.enabled": True, "fgsm.negatives": 4},
    "prealign_only": {"paths.train": None, "synonyms.steps": SYN_STEPS},
    "prealign_only_ce_mixed50": {"paths.train": None, "synonyms.steps": SYN_STEPS, "loss.name": "ce", "negatives.hard_fraction": 0.5},
    "ce_whole_kb": {"loss.name": "ce", "negatives.kind": "kb"},
    "ce_cosine_mixed50": {"loss.name": "ce_cosine", "negatives.hard_fraction": 0.5},
    "ce_cosine_whole_kb": {"loss.name": "ce_cosine", "negatives.kind": "kb"},
    # longer runs of the best setting: one epoch (what `spacy project run all` trains), then two more
    # epochs continued from its checkpoint (the linear schedule restarts over 3 epochs: a warm restart)
    "ce_mixed50_1ep": {"loss.name": "ce", "negatives.hard_fraction": 0.5, "training.max_steps": 0, "training.epochs": 1, "training.eval_every": 100},
    "ce_mixed50_3ep": {"loss.name": "ce", "negatives.hard_fraction": 0.5, "training.max_steps": 0, "training.epochs": 3,
                       "training.eval_every": 100, "_continue": "ce_mixed50_1ep"},
    # the best CPU loss (ce_cosine) for 3 epochs from the start, one uninterrupted schedule
    "ce_cosine_mixed50_3ep": {"loss.name": "ce_cosine", "negatives.hard_fraction": 0.5, "training.max_steps": 0,
                              "training.epochs": 3, "training.eval_every": 100},
    "best+prealign": "best",
    "best_x4_steps": "best_x4",
    # the paper's setting on a GPU: both towers trained (the KB is re-encoded with the trained entity
    # tower for evaluation), KB synonym pre-alignment first, then several epochs of mention training;
    # the encoder at the end of pre-alignment is evaluated as its own row (`_stages`)
    "gpu_both_towers_prealign": {
        "_gpu": True, "_stages": ["synonyms"],
        "training.train_entity_encoder": True, "training.precision": "bf16", "training.max_steps": 400,
        "training.batch_size": 64, "training.warmup": 0.1, "training.eval_every": 250,
        "training.eval_kb_sample": 50000, "loss.name": "ce_cosine", "negatives.hard_fraction": 0.5,
        "negatives.pool": 0, "negatives.refresh_every": 250, "synonyms.steps": 600, "synonyms.pairs": 38400,
    },
}
COMPARED = ["pb_random", "pb_mixed50", "ce_random", "ce_mixed50", "pb_mixed50_fgsm"]


def evaluate_encoder(encoder_dir, index, docs, train_ids, context: int, device: str = "auto", rebuild_kb: bool = False) -> dict:
    """Link every dev gold mention with ``encoder_dir`` against ``index`` (or, with ``rebuild_kb``,
    against the same entities re-encoded by the encoder's own, trained, entity tower)."""
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"context_window": context, "device": device})
    encoder = BiEncoder.from_pretrained(encoder_dir) if encoder_dir else BiEncoder.from_pretrained()
    kb_seconds = None
    if rebuild_kb:
        encoder.to_device(device)
        t0 = time.perf_counter()
        index = EntityIndex.build(index.entities, encoder, batch_size=512, progress=True)
        kb_seconds = round(time.perf_counter() - t0, 1)
    linker.set_resources(encoder, index)
    rows, seconds = mention_table(linker, docs, progress=True)
    report = metrics(rows, seconds, index.row, train_ids)
    report["kb_encode_seconds"] = kb_seconds
    per_doc = np.repeat(np.arange(len(docs)), [len(gold_spans(d)) for d in docs])
    top = np.array([row[2][0] for row in rows])
    is_nil = np.array([row[0] == [NIL] for row in rows])
    calib, test = per_doc < len(docs) // 2, per_doc >= len(docs) // 2
    curve = nil_curve(top[calib], is_nil[calib])
    pred = top[test] < curve["threshold"]
    report["nil_heldout"] = {
        "threshold": curve["threshold"],
        **prf(int((pred & is_nil[test]).sum()), int(pred.sum()), int(is_nil[test].sum())),
        "nil_mentions": int(is_nil[test].sum()),
    }
    return report


def main(kb: Path = typer.Option(Path("kbs/mesh")), dev: Path = typer.Option(Path("corpus/bc5cdr_dev.spacy")),
         train_corpus: Path = typer.Option(Path("corpus/bc5cdr_train.spacy"), "--train"),
         runs_dir: Path = typer.Option(Path("training/bench")), only: str = typer.Option("", help="comma-separated runs"),
         device: str = typer.Option("auto", help="auto, cpu or cuda; runs marked GPU are skipped without CUDA"),
         base: str = typer.Option("all-MiniLM-L6-v2", help="base encoder: Hugging Face name or local folder")):
    out = HERE / "retriever"
    out.mkdir(exist_ok=True)
    nlp = spacy.blank("en")
    docs = read_docbin(nlp, dev)
    train_ids = corpus_ids(read_docbin(nlp, train_corpus))
    index = EntityIndex.from_disk(kb)
    base = {**BUDGET, "paths.kb": str(kb), "paths.dev": str(dev), "paths.train": str(train_corpus), "training.device": device,
            "encoder.base": base}
    import torch

    has_gpu = torch.cuda.is_available() and device != "cpu"
    for name, ov in RUNS.items():
        if only and name not in only.split(","):
            continue
        result_file = out / f"{name}.json"
        if result_file.exists():
            continue
        if ov in ("best", "best_x4"):
            done = {r: json.loads((out / f"{r}.json").read_text()) for r in COMPARED if (out / f"{r}.json").exists()}
            if len(done) < len(COMPARED):
                print(f"skip {name}: compared runs not finished")
                continue
            best = max(done, key=lambda r: done[r]["recall_in_kb"]["R@1"])
            extra = {"synonyms.steps": SYN_STEPS} if ov == "best" else {"training.max_steps": 4 * BUDGET["training.max_steps"]}
            ov = {**RUNS[best], **extra, "_best": best}
        if isinstance(ov, dict) and ov.get("_gpu") and not has_gpu:
            print(f"skip {name}: needs a CUDA GPU")
            continue
        state, encoder_dir = {}, None
        if isinstance(ov, dict) and "_continue" in ov and not (runs_dir / name).exists():
            if not (runs_dir / ov["_continue"] / "last").exists():
                print(f"skip {name}: run {ov['_continue']} first")
                continue
            shutil.copytree(runs_dir / ov["_continue"], runs_dir / name)
        if ov is not None:
            settings = {**base, **{k: v for k, v in ov.items() if not k.startswith("_")}}
            t0 = time.perf_counter()
            state = train(CONFIG, runs_dir / name, settings)
            state["wall_s"] = round(time.perf_counter() - t0, 1)
            encoder_dir = runs_dir / name / "best"
        rebuild = isinstance(ov, dict) and bool(ov.get("training.train_entity_encoder"))
        context = BUDGET["encoder.mention_max_length"]
        gpu_name = torch.cuda.get_device_name() if has_gpu else None
        for stage in ov.get("_stages", []) if isinstance(ov, dict) else []:  # e.g. the encoder after pre-alignment alone
            stage_file = out / f"{name}.after_{stage}.json"
            if not stage_file.exists():
                report = evaluate_encoder(runs_dir / name / f"after_{stage}", index, docs, train_ids, context, device, rebuild)
                report["run"] = {"name": f"{name}: after {stage} only", "overrides": ov, "gpu": gpu_name,
                                 "train_seconds": None, "steps": ov.get(f"{stage}.steps")}
                stage_file.write_text(json.dumps(report, indent=2))
        report = evaluate_encoder(encoder_dir, index, docs, train_ids, context, device, rebuild)
        report["run"] = {"name": name, "overrides": ov, "train_seconds": round(state.get("train_seconds", 0.0), 1),
                         "steps": state.get("step", 0), "best_step": state.get("best_step"), "history": state.get("history"),
                         "gpu": gpu_name, "wall_s": state.get("wall_s")}
        result_file.write_text(json.dumps(report, indent=2))
        write_table(out)


def write_table(out: Path) -> None:
    lines = [
        "# Retriever training on BC5CDR train; evaluation on BC5CDR dev vs all 354,068 MeSH records",
        "",
        "Reproduce: `python benchmarks/retriever.py` (needs `kbs/mesh` and the converted corpora; see the script's doc).",
        "",
        f"Budget for every trained run: {BUDGET['training.max_steps']} steps × batch {BUDGET['training.batch_size']} mentions "
        f"(≈0.4 epoch; a 2-core CPU's budget), {BUDGET['negatives.count']} negatives per mention, lr {BUDGET['training.lr']}, 25% warm-up, "
        f"mention context {BUDGET['encoder.mention_max_length']} word pieces, entity tower frozen (the KB built with the "
        f"base encoder is reused), CPU (2 cores). Pre-alignment adds {SYN_STEPS} steps on KB synonym pairs; `best_x4_steps` is the best setting with 4× the steps.",
        "",
        "| run | R@1 | R@64 | unseen R@1 | seen R@1 | NIL P / R / F1 (held-out half) | NIL AP | train time | dev mentions/s |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    files = []
    for name in RUNS:
        ov = RUNS[name] if isinstance(RUNS[name], dict) else {}
        files += [out / f"{name}.after_{stage}.json" for stage in ov.get("_stages", [])] + [out / f"{name}.json"]
    for f in files:
        if not f.exists():
            continue
        r = json.loads(f.read_text())
        n = r["nil_heldout"]
        name, ov = r["run"]["name"], r["run"]["overrides"]
        label = name if not isinstance(ov, dict) or "_best" not in ov else f"{name} ({ov['_best']})"
        gpu = r["run"].get("gpu")
        label += f" ({gpu})" if gpu else ""
        secs = r["run"]["train_seconds"]
        train_time = "see below" if secs is None else f"{secs / 60:.1f} min"
        lines.append(
            f"| {label} | {r['recall_in_kb']['R@1']:.3f} | {r['recall_in_kb']['R@64']:.3f} | {r['recall_unseen']['R@1']:.3f} | "
            f"{r['recall_seen']['R@1']:.3f} | {n['p']:.2f} / {n['r']:.2f} / {n['f']:.2f} | {r['nil']['average_precision']:.3f} | "
            f"{train_time} | {r['mentions_per_s']} |"
        )
    lines += ["", "R@k over the dev mentions whose gold id is in the KB; unseen = gold entity never in BC5CDR train.",
              "`prealign_only` uses the config's default loss (proxy, random negatives); `prealign_only_ce_mixed50` the CE mixed-50% setting.",
              "`ce_whole_kb`: CE with every KB row as a negative (`negatives.kind = \"kb\"`, an exact softmax over 354k "
              "entities); it ran while the 2 cores were shared with a KB build, so its train time and mentions/s are "
              "inflated (about 2×) and not comparable with the other rows.",
              "`ce_cosine_mixed50`: CE on 20 × cosine (`loss.name = \"ce_cosine\"`, a fixed softmax temperature) with "
              "mixed-50% negatives, same budget.",
              "`ce_mixed50_1ep` / `ce_mixed50_3ep`: the best setting beyond the shared budget — one epoch (286 steps; the run "
              "of `spacy project run all`, copied from its clean-clone run) and then two more epochs continued from its "
              "checkpoint (858 steps in all; the linear schedule restarts over the 3 epochs). Their train time and "
              "mentions/s were measured while other jobs shared the 2 cores.",
              "`ce_cosine_mixed50_3ep`: the best CPU setting (CE on 20 × cosine, mixed-50% negatives) for 3 epochs "
              "(858 steps) in one uninterrupted schedule, mention tower only.",
              "GPU rows (`gpu_both_towers_prealign`; `python benchmarks/retriever.py --only gpu_both_towers_prealign "
              "--device cuda` on a CUDA machine): the paper's setting, both towers trained, bf16 autocast, batch 64, 32 "
              "negatives (half hard, from the whole KB re-encoded every 250 steps), CE on 20 × cosine, lr 5e-5, 10% "
              "warm-up; 600 steps of KB synonym pre-alignment (38,400 pairs), then 400 steps (≈2.7 epochs) on BC5CDR "
              "train. The KB is re-encoded with the trained entity tower before evaluation (57 s on the H100). The "
              "`after synonyms only` row is the same run's encoder at the end of pre-alignment, before any mention was "
              "seen (pre-alignment alone). The reported run was started for 6 epochs and cut by the GPU time this "
              "session had: it resumed from its step-750 checkpoint with 400 mention steps, so its learning rate, "
              "which followed a 1,458-step schedule up to step 750, then decayed to 0 at step 1,000. The same "
              "run's step-750 checkpoint (150 mention steps) scored R@1 0.794, R@64 0.910, unseen 0.586. Its weights "
              "had been rounded to fp16 (and word-piece rows that no MeSH or BC5CDR text uses replaced by the mean "
              "row) to carry the base model to the GPU machine. Train time is H100 time (0.8 s a step: the loop "
              "tokenises and re-encodes ~2,100 entities a step and mines negatives with FAISS on the CPU; it is "
              "not GPU-bound) and is not comparable with the CPU rows.",
              "Bars from the issue: alias table R@1 0.790 overall / 0.600 unseen; target ≥ 0.90 / ≥ 0.75.", ""]
    (out.parent / "retriever.md").write_text("\n".join(lines))


if __name__ == "__main__":
    typer.run(main)
