"""What finds the mentions a saved pipeline links in raw text, read from its config (nothing loaded):
an NER (a component before ``pel_linker`` that sets ``doc.ents`` or the span group it links) or the
linker's own span finder (``spacy_pel.mentions.span_finder.v1``). Commands that run a pipeline on raw
text (``link``, ``bulk``, ``evaluate --e2e``, ``calibrate --e2e``) refuse one that has neither before
loading anything.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import List, Optional, Tuple

import spacy

from ..files import InputError

log = logging.getLogger(__name__)
SPAN_FINDER = "spacy_pel.mentions.span_finder.v1"
NO_FINDER = "it has no NER (no component before pel_linker sets the spans it links) and pel_linker has no span finder"


def _before_linker(config) -> Tuple[str, List[Tuple[str, dict]]]:
    names = list(config["nlp"]["pipeline"])
    components = config["components"]
    linker = next((n for n in names if components[n].get("factory") == "pel_linker"), None)
    if linker is None:
        raise ValueError("the pipeline has no pel_linker")
    return linker, [(n, components[n]) for n in names[: names.index(linker)]]


def mention_finders(config) -> Tuple[bool, List[str]]:
    """Read from a pipeline's config (nothing loaded): does ``pel_linker`` find its own spans (a span
    finder), and which components before it set the spans it links (``doc.ents`` or a span group)?"""
    linker, before = _before_linker(config)
    lang = spacy.blank(config["nlp"]["lang"])  # spaCy registers its factories (and their metadata) lazily
    mentions = config["components"][linker].get("mentions") or {}
    wanted = "doc.spans" if mentions.get("spans_key") else "doc.ents"
    found = []
    for name, block in before:
        factory = block.get("factory")
        if factory is None:  # a sourced component: its metadata is in another pipeline; assume it may
            found.append(name)
            continue
        try:
            assigns = lang.get_factory_meta(factory).assigns
        except ValueError:  # a factory of a package not installed here: spaCy fails at load anyway
            continue
        if any(a == wanted or a.startswith(wanted + "[") or (wanted == "doc.spans" and a.startswith("doc.spans")) for a in assigns):
            found.append(name)
    return mentions.get("@misc") == SPAN_FINDER, found


def pipeline_mention_finders(pipeline: Path) -> Tuple[bool, List[str]]:
    """:func:`mention_finders` of a saved pipeline, read from its ``config.cfg`` (``InputError`` when it
    has none, or no ``pel_linker``)."""
    if not (Path(pipeline) / "config.cfg").is_file():
        raise InputError(f"pipeline {pipeline} has no config.cfg: is it a saved spaCy pipeline?")
    try:
        return mention_finders(spacy.util.load_config(Path(pipeline) / "config.cfg", interpolate=True))
    except ValueError as err:
        raise InputError(f"pipeline {pipeline}: {err}") from err


def check_finds_mentions(pipeline: Path, option: str) -> None:
    """Refuse (``InputError``), for a command's ``option`` that runs ``pipeline`` on raw text (``--e2e``),
    a pipeline that cannot find mentions there: it would score, or calibrate on, nothing."""
    finds_own, finders = pipeline_mention_finders(pipeline)
    if not finds_own and not finders:
        raise InputError(f"{option} runs pipeline {pipeline} on raw text, but it cannot find mentions there: {NO_FINDER} "
                         f"({SPAN_FINDER}); leave out {option} to use the corpus's gold spans")


def check_mention_source(pipeline: Path, raw: Optional[str], given: bool) -> None:
    """Refuse a pipeline that cannot find mentions in raw text (``raw``: the path of an input of raw text,
    if any) before anything is linked; warn that the spans of ``given`` (annotated) input are not used
    when ``pel_linker`` finds its own."""
    finds_own, finders = pipeline_mention_finders(pipeline)
    if raw is not None and not finds_own and not finders:
        raise InputError(f"{raw} is raw text (no mentions given), but pipeline {pipeline} cannot find mentions in it: "
                         f"{NO_FINDER}; give PubTator input with the mentions, or a pipeline with an NER or {SPAN_FINDER}")
    if finds_own and given:
        log.warning("pel_linker finds its own spans (span finder): the spans given in PubTator input are not used")
