"""What the benchmark scripts share: the machine they ran on, CPU-time accounting, the retriever budget.

Run a script from the repository root, ``python benchmarks/x.py``: Python puts the script's folder
first on ``sys.path``, so ``from _common import machine`` needs no ``sys.path`` insert.
"""
import subprocess
from pathlib import Path

# the speed benchmark defines these (and is run on its own); every other script takes them from here
from speed import SHARED, cpu_seconds, machine, others_busy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
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

__all__ = ["BUDGET", "HERE", "RETRIEVER_CONFIG", "ROOT", "SHARED", "cpu_seconds", "lscpu_model", "machine", "others_busy"]


def lscpu_model() -> str:
    """The CPU's model name as ``lscpu`` reports it ("" without lscpu)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""
    return next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Model name")), "")
