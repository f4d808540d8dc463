"""How clustering inference links a linker's mentions (``pel_discovery``'s and ``discover``'s ``linking``).

One rule, used where a discovery is configured (:mod:`spacy_pel.discovery`) and where a calibration would
change what it links with (``calibrate --nil classifier``): ``"auto"`` → ``"cluster"`` when the linker's NIL
confidence is its best score (its threshold is then a cosine floor for the graph's edges) and it has no
candidate rules, else ``"pipeline"``; a NIL classifier's threshold is a probability, so ``"cluster"`` with one
needs its own edge floor (``threshold``); ``"pipeline"`` keeps the linker's decisions and takes no floor.
"""
from __future__ import annotations

from typing import Optional

LINKING = ("auto", "cluster", "pipeline")


def linking_mode(linking: str, threshold: Optional[float], *, score_confidence: bool, rules: bool,
                 nil_threshold: Optional[float], linker: str) -> str:
    """``linking`` resolved for a linker named ``linker`` whose NIL confidence is its best score
    (``score_confidence``) or a classifier's probability, with candidate ``rules`` or none, and NIL threshold
    ``nil_threshold``; ``threshold``: the edge floor asked for. An unknown mode, or ``"cluster"`` with a
    classifier's probability for a floor, raises ``ValueError``; what the mode takes: :func:`check_mode_settings`."""
    if linking not in LINKING:
        raise ValueError(f"linking must be one of {', '.join(LINKING)}, not {linking!r}")
    if linking == "auto":
        return "cluster" if score_confidence and not rules else "pipeline"
    if linking == "cluster" and threshold is None and not score_confidence and nil_threshold is not None:
        raise ValueError(f"{linker}'s NIL threshold {nil_threshold} is its NIL classifier's probability, not a "
                         "similarity: give clustering inference an edge floor (threshold), or link with 'pipeline' (or 'auto')")
    return linking


def check_mode_settings(mode: str, threshold: Optional[float]) -> str:
    """``mode`` (resolved: ``"cluster"`` or ``"pipeline"``) if it takes the edge floor ``threshold``, else ``ValueError``."""
    if mode == "pipeline" and threshold is not None:
        raise ValueError("threshold is clustering inference's edge floor; linking 'pipeline' keeps the linker's own NIL "
                         "decisions and clusters its NIL mentions by mention_threshold alone: drop it, or link with 'cluster'")
    return mode
