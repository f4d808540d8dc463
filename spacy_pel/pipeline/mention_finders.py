"""What finds the mentions a saved pipeline links in raw text, read from its config (nothing loaded):
an NER (a component before ``pel_linker`` that sets ``doc.ents`` or the span group it links) or the
linker's own span finder (``spacy_pel.mentions.span_finder.v1``). Commands that run a pipeline on raw
text (``link``, ``bulk``, ``evaluate --e2e``, ``calibrate --e2e``) refuse one that has neither before
loading anything. What a component sets is what its factory declares (``assigns``), or what its settings
say where they decide (a ``span_ruler`` with ``annotate_ents = true`` sets ``doc.ents``); a custom
component that declares nothing may set the spans: such a pipeline is accepted, with a warning.
A component the config disables (``[nlp] disabled``, what ``nlp.disable_pipe`` then ``to_disk`` writes) is never run
by ``spacy.load``, so it finds nothing: it counts as absent, and the refusal names it as disabled (a disabled
``pel_linker`` is not the one whose mentions are looked for).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import List, NamedTuple, Optional, Tuple

import spacy

from ..files import InputError

log = logging.getLogger(__name__)
SPAN_FINDER = "spacy_pel.mentions.span_finder.v1"
NO_FINDER = "it has no NER (no component before pel_linker sets the spans it links) and pel_linker has no span finder"
DISABLED_LINKER = "its pel_linker ({names}) is disabled in its config ([nlp] disabled)"


def _disabled(config) -> List[str]:
    """The components the config disables (``[nlp] disabled``): ``spacy.load`` loads them, never runs them."""
    return list(config["nlp"].get("disabled") or [])


def _before_linker(config, disabled: bool = False) -> Tuple[str, List[Tuple[str, dict]]]:
    """The first enabled ``pel_linker`` and the components before it: the enabled ones (``disabled``: the
    disabled ones instead)."""
    names, off = list(config["nlp"]["pipeline"]), set(_disabled(config))
    components = config["components"]
    linkers = [n for n in names if components[n].get("factory") == "pel_linker"]
    if not linkers:
        raise ValueError("the pipeline has no pel_linker")
    linker = next((n for n in linkers if n not in off), None)
    if linker is None:
        raise ValueError(f"{DISABLED_LINKER.format(names=', '.join(map(repr, linkers)))}; remove it from [nlp] disabled in "
                         f"its config.cfg (or nlp.enable_pipe({linkers[0]!r}), then save)")
    return linker, [(n, components[n]) for n in names[: names.index(linker)] if (n in off) == disabled]


def _span_ruler_assigns(settings: dict) -> List[str]:
    """span_ruler declares ``doc.spans``; with ``annotate_ents`` it sets ``doc.ents``, without a
    ``spans_key`` no span group."""
    return ["doc.ents"] * bool(settings.get("annotate_ents")) + ["doc.spans"] * (settings.get("spans_key") is not None)


ASSIGNS_BY_SETTINGS = {"span_ruler": _span_ruler_assigns}  # factories whose settings decide what they set


def _declares_nothing(factory: str) -> bool:
    """A factory that declares no ``assigns`` and is not one of spaCy's pipes (whose declarations are
    complete): a custom component, which may set the spans without saying so."""
    try:
        module = spacy.registry.find("factories", factory)["module"] or ""
    except ValueError:  # registered under another name: not by spaCy
        module = ""
    return not (module.startswith("spacy.") and module != "spacy.language")  # spacy.language: @Language.component


class Finders(NamedTuple):
    """What finds a pipeline's mentions (:func:`scan_mention_finders`): ``own``, pel_linker's span
    finder; ``components``, those before it that set the spans it links; ``undeclared``, those before it
    that declare nothing they set (a custom ``@Language.component``), which may set them."""

    own: bool
    components: List[str]
    undeclared: List[str]


def scan_mention_finders(config, disabled: bool = False) -> Finders:
    """Read from a pipeline's config (nothing loaded) what finds the mentions ``pel_linker`` (its first
    enabled one) links (:class:`Finders`), among the enabled components before it (``disabled``: among the
    disabled ones, which would). A component sets what its factory declares it assigns, or, for factories whose
    settings decide (span_ruler's ``annotate_ents``), what its settings in the config say."""
    linker, before = _before_linker(config, disabled)
    lang = spacy.blank(config["nlp"]["lang"])  # spaCy registers its factories (and their metadata) lazily
    mentions = config["components"][linker].get("mentions") or {}
    wanted = "doc.spans" if mentions.get("spans_key") else "doc.ents"
    found, undeclared = [], []
    for name, block in before:
        factory = block.get("factory")
        if factory is None:  # a sourced component: its metadata is in another pipeline; assume it may
            found.append(name)
            continue
        try:
            meta = lang.get_factory_meta(factory)
        except ValueError:  # a factory of a package not installed here: spaCy fails at load anyway
            continue
        by_settings = ASSIGNS_BY_SETTINGS.get(factory)
        assigns = by_settings({**meta.default_config, **block}) if by_settings else meta.assigns
        if any(a == wanted or a.startswith(wanted + "[") or (wanted == "doc.spans" and a.startswith("doc.spans")) for a in assigns):
            found.append(name)
        elif not meta.assigns and not by_settings and _declares_nothing(factory):
            undeclared.append(name)
    return Finders(mentions.get("@misc") == SPAN_FINDER, found, undeclared)


def mention_finders(config) -> Tuple[bool, List[str]]:
    """Read from a pipeline's config (nothing loaded): does ``pel_linker`` find its own spans (a span
    finder), and which components before it set the spans it links (``doc.ents`` or a span group)?"""
    finders = scan_mention_finders(config)
    return finders.own, finders.components


def pipeline_mention_finders(pipeline: Path, disabled: bool = False) -> Finders:
    """:func:`scan_mention_finders` of a saved pipeline, read from its ``config.cfg`` (``InputError`` when
    it has none, no ``pel_linker``, or only disabled ones)."""
    if not (Path(pipeline) / "config.cfg").is_file():
        raise InputError(f"pipeline {pipeline} has no config.cfg: is it a saved spaCy pipeline?")
    try:
        return scan_mention_finders(spacy.util.load_config(Path(pipeline) / "config.cfg", interpolate=True), disabled)
    except ValueError as err:
        raise InputError(f"pipeline {pipeline}: {err}") from err


def _disabled_note(pipeline: Path) -> str:
    """The disabled components before ``pel_linker`` that would find the mentions, named (else "")."""
    off = pipeline_mention_finders(pipeline, disabled=True)
    names = off.components + off.undeclared
    if not names:
        return ""
    one = len(names) == 1
    return (f" — {', '.join(names)} before it {'is' if one else 'are'} disabled in its config ([nlp] disabled), "
            f"and spacy.load never runs a disabled component: remove {'it' if one else 'them'} from [nlp] disabled in "
            f"config.cfg (or nlp.enable_pipe({names[0]!r}), then save)")


def _cannot_find(pipeline: Path, finders: Finders) -> bool:
    """Nothing finds the mentions; when only components that declare nothing might, a warning (they are
    trusted to: the config cannot tell)."""
    if finders.own or finders.components:
        return False
    if finders.undeclared:
        log.warning("pipeline %s: %s before pel_linker declare%s nothing they set; assuming they set the spans "
                    "pel_linker links (if not, nothing is linked)", pipeline, ", ".join(finders.undeclared),
                    "s" if len(finders.undeclared) == 1 else "")
    return not finders.undeclared


def check_finds_mentions(pipeline: Path, option: str) -> None:
    """Refuse (``InputError``), for a command's ``option`` that runs ``pipeline`` on raw text (``--e2e``),
    a pipeline that cannot find mentions there: it would score, or calibrate on, nothing."""
    if _cannot_find(pipeline, pipeline_mention_finders(pipeline)):
        raise InputError(f"{option} runs pipeline {pipeline} on raw text, but it cannot find mentions there: {NO_FINDER} "
                         f"({SPAN_FINDER}){_disabled_note(pipeline)}; leave out {option} to use the corpus's gold spans")


def check_mention_source(pipeline: Path, raw: Optional[str], given: bool) -> None:
    """Refuse a pipeline that cannot find mentions in raw text (``raw``: the path of an input of raw text,
    if any) before anything is linked; warn that the spans of ``given`` (annotated) input are not used
    when ``pel_linker`` finds its own."""
    finders = pipeline_mention_finders(pipeline)
    if raw is not None and _cannot_find(pipeline, finders):
        raise InputError(f"{raw} is raw text (no mentions given), but pipeline {pipeline} cannot find mentions in it: "
                         f"{NO_FINDER}{_disabled_note(pipeline)}; give PubTator input with the mentions, or a pipeline with an NER or {SPAN_FINDER}")
    if finders.own and given:
        log.warning("pel_linker finds its own spans (span finder): the spans given in PubTator input are not used")
