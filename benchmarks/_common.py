"""What the benchmark scripts share: the machine they ran on, CPU-time accounting, the retriever budget.

Run a script from the repository root, ``python benchmarks/x.py``: Python puts the script's folder
first on ``sys.path``, so ``from _common import machine`` needs no ``sys.path`` insert.
"""
import hashlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared" / "data"
# The retriever benchmark's training budget (benchmarks/retriever.md), reused by discovery, seeds and
# e2e_joint so that their trained runs compare; RETRIEVER_CONFIG is the config it trains.
RETRIEVER_CONFIG = ROOT / "configs" / "train_pb_random.cfg"
BUDGET = {
    "training.max_steps": 120,
    "training.batch_size": 32,
    "training.lr": 5e-5,
    "training.eval_every": 60,
    "training.eval_docs": 100,
    "encoder.mention_max_length": 64,
    "negatives.count": 32,
}
# /proc/cpuinfo's lines that tell CPUs apart → machine()'s keys
CPUINFO_FIELDS = {"vendor_id": "vendor", "cpu family": "cpu_family", "model": "cpu_model", "stepping": "stepping"}

__all__ = ["BUDGET", "HERE", "RETRIEVER_CONFIG", "ROOT", "SHARED", "cpu_id", "cpu_seconds", "evaluate_figures", "lscpu_model", "machine", "machine_line", "invocation", "linked_r1", "median_cell", "others_busy", "report_footer", "run_timed", "spacy_pel", "steal_seconds", "with_gold_ents"]


def lscpu_model() -> str:
    """The CPU's model name as ``lscpu`` reports it ("" without lscpu)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""
    return next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Model name")), "")


def machine() -> dict:
    """The CPU and software a report ran on. ``cpu`` is /proc/cpuinfo's model name, which a hypervisor may
    mask (a Zen 4 and a Zen 5 both read "AMD EPYC"): ``vendor``, ``cpu_family``, ``cpu_model`` and
    ``stepping`` tell CPUs apart (AMD family 25 = Zen 3/4, 26 = Zen 5), ``flags`` lists the ones that
    choose kernels and ``flags_sha1`` fingerprints the whole flag set."""
    flags, info = set(), {}
    model = platform.processor()
    if Path("/proc/cpuinfo").exists():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "processor" and info:  # the first CPU's lines are enough
                break
            if key == "model name":
                model = value
            elif key == "flags":
                flags = set(value.split())
            elif key in CPUINFO_FIELDS:
                info[CPUINFO_FIELDS[key]] = int(value) if value.isdigit() else value
    wanted = ["avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8"]
    return {"cpu": model, **info, "flags": [f for f in wanted if f in flags],
            "flags_sha1": hashlib.sha1(" ".join(sorted(flags)).encode()).hexdigest()[:12],
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version()}


def cpu_id(m: dict) -> str:
    """A :func:`machine` dict's CPU identity, "family 26 model 2 stepping 1" ("" where not recorded: reports
    written before session 73)."""
    return " ".join(f"{word} {m[key]}" for word, key in (("family", "cpu_family"), ("model", "cpu_model"), ("stepping", "stepping"))
                    if key in m)


def machine_line(m: dict) -> str:
    """A report's "Machine: …" sentence from a :func:`machine` dict (with ``lscpu_model`` where recorded)."""
    facts = ([cpu_id(m)] if cpu_id(m) else []) + [", ".join(m["flags"])]
    return f"Machine: {m.get('lscpu_model') or m['cpu']} ({'; '.join(facts)}), torch {m['torch']}, {m['torch_threads']} threads"


def with_gold_ents(docs) -> list:
    """Copies of ``docs`` without annotation whose ``doc.ents`` are their gold spans (mention linking)."""
    from spacy.tokens import Span

    from spacy_pel.corpora import bare_doc, gold_spans

    out = []
    for doc in docs:
        copy = bare_doc(doc)
        copy.ents = [Span(copy, s.start, s.end, label=s.label_) for s in gold_spans(doc)]
        out.append(copy)
    return out


def linked_r1(linker, gold_docs, linked_docs, train_ids: Optional[set] = None) -> dict:
    """R@1 of the mentions ``nlp.pipe`` linked (``linked_docs``: the gold spans of ``gold_docs`` set as
    ``doc.ents``, paired by position) with evaluate's definitions (:func:`spacy_pel.evaluation.linking.metrics`):
    alternative ids in the gold (and ``train_ids``) count as their entity's primary id, ``in_kb`` is every
    mention with a gold id in the KB, seen / unseen split it by ``train_ids``. A group without a mention
    has R@1 None (not a division by zero)."""
    from spacy_pel.corpora import gold_ids, gold_spans
    from spacy_pel.evaluation.linking import canonical_ids, metrics

    rows = [([linker.index.canonical(i) for i in gold_ids(g.kb_id_)], [p.kb_id_], [0.0])
            for gold_doc, doc in zip(gold_docs, linked_docs) for g, p in zip(gold_spans(gold_doc), doc.ents)]
    m = metrics(rows, 0.0, linker.index.row, canonical_ids(linker, train_ids))
    out = {"in_kb": m["counts"]["in_kb"], "R@1": m["recall_in_kb"].get("R@1")}
    if train_ids is not None:
        out.update({"seen": m["counts"]["seen"], "R@1_seen": m["recall_seen"].get("R@1"),
                    "unseen": m["counts"]["unseen"], "R@1_unseen": m["recall_unseen"].get("R@1")})
    return out


def cpu_ticks() -> List[int]:
    """The machine's CPU time by kind, in clock ticks: the ``cpu`` line of ``/proc/stat`` (user, nice,
    system, idle, iowait, irq, softirq, then steal where the kernel reports it)."""
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def cpu_seconds() -> tuple:
    """(busy CPU seconds of the whole machine, CPU seconds of this process and its waited children)."""
    ticks = cpu_ticks()[:7]
    t = os.times()
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK"), t.user + t.system + t.children_user + t.children_system


def steal_seconds() -> float:
    """CPU seconds the hypervisor gave other machines while this one wanted to run (``steal`` of
    ``/proc/stat``, all cores): a virtual machine's timing figures move with it."""
    ticks = cpu_ticks()
    return ticks[7] / os.sysconf("SC_CLK_TCK") if len(ticks) > 7 else 0.0


def others_busy(before: tuple, after: tuple, seconds: float) -> float:
    """Cores kept busy by other processes between two :func:`cpu_seconds` (interference while timing)."""
    return round(max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / seconds, 2)


def invocation(skip=("--notes",)) -> str:
    """The command that ran this script, shell-quoted, without the options in ``skip`` and their values
    (a report's "Reproduce" line says what was run, not what the defaults would run)."""
    kept, args = [], iter(sys.argv[1:])
    for arg in args:
        if arg.split("=", 1)[0] in skip:
            if "=" not in arg:
                next(args, None)
            continue
        kept.append(arg)
    return shlex.join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *kept])


def median_cell(values: List[float]) -> str:
    """A table cell: the median in bold, then every value (``**2,703** (2,487, 2,874, …)``)."""
    return f"**{statistics.median(values):,.0f}** ({', '.join(f'{x:,.0f}' for x in values)})"


def e2e_arms_table(cases: dict, arm_column: str) -> List[str]:
    """A markdown table of e2e figures: one row per case and arm (``{case: {arm: run}}``, each run as
    ``e2e_pipeline.run`` scores it: ``strict``, ``span``, ``predicted``)."""
    lines = [f"| case | {arm_column} | strict P | strict R | strict F1 | span F1 | predicted |", "|---|---|---:|---:|---:|---:|---:|"]
    for case, arms in cases.items():
        for arm, m in arms.items():
            s = m["strict"]
            lines.append(f"| {case} | {arm} | {s['p']:.4f} | {s['r']:.4f} | **{s['f']:.4f}** | {m['span']['f']:.4f} | {m['predicted']} |")
    return lines


def report_footer(report: dict) -> List[str]:
    """A report's closing markdown lines: the command that wrote it (``report["command"]``), then its notes."""
    return ["", f"Written by `{report['command']}`.", "", *([report["notes"], ""] if report.get("notes") else [])]


def run_timed(command: str, digits: int = 1) -> float:
    """Run the shell ``command`` from the repository root (failing loudly); its wall-clock minutes."""
    t0 = time.perf_counter()
    subprocess.run(command, shell=True, check=True, cwd=ROOT)
    return round((time.perf_counter() - t0) / 60, digits)


def spacy_pel(*args: str) -> None:
    """Run ``python -m spacy_pel ARGS`` as a user would, its output hidden; a failure raises."""
    subprocess.run([sys.executable, "-m", "spacy_pel", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# evaluate's JSON report → the figures a benchmark table shows (unseen / seen: None without --train or
# with no such mention, e.g. a corpus linked to another KB than the one trained on)
FIGURES = {
    "mentions": lambda r: r["counts"]["in_kb"],
    "r1": lambda r: r["recall_in_kb"]["R@1"],
    "r2": lambda r: r["recall_in_kb"]["R@2"],
    "r64": lambda r: r["recall_in_kb"]["R@64"],
    "unseen_r1": lambda r: (r.get("recall_unseen") or {}).get("R@1"),
    "seen_r1": lambda r: (r.get("recall_seen") or {}).get("R@1"),
}


def evaluate_figures(corpus: Path, out: Path, figures: Sequence[str], pipeline: Optional[Path] = None, kb: Optional[Path] = None,
                     train: Optional[Path] = None, reuse: bool = False, options: Sequence[str] = ()) -> dict:
    """``python -m spacy_pel evaluate CORPUS`` of a pipeline (or a KB folder: the retriever alone) with its
    JSON report at ``out`` (kept and read again when ``reuse`` and it exists: a cut run resumes), and the
    named :data:`FIGURES` of it. ``options``: more of evaluate's flags (``("--errors", PATH)``)."""
    if not (reuse and out.exists()):
        if (pipeline is None) == (kb is None):
            raise ValueError("evaluate_figures: give a pipeline or a KB folder (one of them)")
        source = ["--pipeline", str(pipeline)] if pipeline is not None else ["--kb", str(kb)]
        spacy_pel("evaluate", str(corpus), *source, *(["--train", str(train)] if train is not None else []), "--output", str(out), *options)
    report = json.loads(out.read_text(encoding="utf8"))
    return {name: FIGURES[name](report) for name in figures}
