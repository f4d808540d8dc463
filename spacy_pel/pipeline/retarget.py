"""A trained pipeline linking against another KB (``python -m spacy_pel retarget``).

The pipeline keeps its rules, maps and NIL strategy; its ``pel_linker`` gets the new KB folder, the
encoder that encoded it (the KB's own, recorded in its ``meta.json``, unless another is given; a KB
encoded by the pipeline's own entity tower — a new release of its KB — keeps the pipeline's encoder) and,
when it has a name-rows rule, the new KB's name rows. A KB never trained on links better when the
pipeline's encoder is first taught that KB's synonyms (``python -m spacy_pel adapt KB --encoder
PIPELINE/pel_linker/encoder``: KB self-alignment from the trained retriever, then ``build-kb`` and
``build-names`` with it; ``benchmarks/retarget.md``). The NIL threshold was calibrated with the old
KB: calibrate again on a corpus of the new one with NIL mentions (``python -m spacy_pel calibrate``).

The written pipeline is self-contained: the KB, encoder and name rows are saved in it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import spacy
from spacy.language import Language

from ..files import InputError, PathLike, atomic_dir, check_output_folder
from ..retrieval.build import check_encoder_source
from ..retrieval.encoder_record import recorded_encoder
from ..retrieval.index import EntityIndex
from .folder import resources_from_paths
from .linker import find_linker
from .rules.name_rows import NAME as NAME_ROWS

LABEL_TYPES_RULE = "spacy_pel.rules.label_types.v1"


def is_pipeline(folder: PathLike) -> bool:
    """True for a saved spaCy pipeline: a folder with ``config.cfg``, or a spaCy ``meta.json`` (its ``lang``)."""
    folder = Path(folder)
    if (folder / "config.cfg").is_file():
        return True
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "lang" in meta


def check_output(output: PathLike) -> None:
    """Refuse an output that writing the pipeline would replace: a file, or a folder that is neither empty nor
    a spaCy pipeline (a KB, a corpus, someone's notes)."""
    check_output_folder(output, "pipeline", is_pipeline)


def saved_linker(pipeline: PathLike, linker: Optional[str] = None) -> Tuple[str, Dict[str, Any]]:
    """The name and config section of a saved pipeline's ``pel_linker`` called ``linker`` (its
    ``config.cfg``, read once); ``None``: its only one — a pipeline with one linker per KB must name the
    one meant, as the others would be left linking against their old KB."""
    config = spacy.util.load_config(Path(pipeline) / "config.cfg")
    linkers = [name for name, comp in config["components"].items() if comp.get("factory") == "pel_linker"]
    if not linkers:
        raise InputError(f"{pipeline}: the pipeline has no pel_linker")
    if linker is None and len(linkers) > 1:
        raise InputError(f"{pipeline}: the pipeline has {len(linkers)} pel_linkers ({', '.join(linkers)}); "
                         "give the one to retarget (--linker NAME; the others keep their KB)")
    if linker is not None and linker not in linkers:
        raise InputError(f"{pipeline}: the pipeline has no pel_linker called {linker!r}; its pel_linkers: {', '.join(linkers)}")
    name = linker if linker is not None else linkers[0]
    return name, config["components"][name]


def _name_row_paths(name: str, linker: Dict[str, Any]) -> List[str]:
    return [f"components.{name}.rules.{key}" for key, rule in linker.get("rules", {}).items() if rule.get("@misc") == NAME_ROWS]


def name_row_rules(pipeline: PathLike, linker: Optional[str] = None) -> List[str]:
    """Config paths of a saved pipeline's name-rows rules (``components.pel_linker.rules.names``), those of
    its pel_linker called ``linker`` (``None``: its only one, :func:`saved_linker`)."""
    return _name_row_paths(*saved_linker(pipeline, linker))


def _own_entity_fingerprint(pipeline: PathLike, name: str) -> Optional[str]:
    """The entity-tower fingerprint of the KB saved in the pipeline (that of the pipeline's encoder)."""
    try:
        return EntityIndex.read_meta(Path(pipeline) / name / "kb").get("encoder_fingerprint")
    except (FileNotFoundError, InputError):
        return None


def linker_overrides(pipeline: PathLike, kb: PathLike, names: Optional[PathLike] = None,
                     encoder: Optional[str] = None, linker: Optional[str] = None) -> Dict[str, str]:
    """The config overrides that point a saved pipeline's ``pel_linker`` (the one called ``linker``; ``None``:
    its only one) at ``kb`` (see the module doc).
    A KB encoded by the pipeline's own entity tower (its next release, the same tower's fingerprint)
    keeps the pipeline's encoder: the KB's ``encoder_source`` may name the base model the frozen
    tower came from, whose mention tower is not the trained one."""
    name, section = saved_linker(pipeline, linker)
    meta = EntityIndex.read_meta(kb)
    overrides = {f"components.{name}.kb": str(kb)}
    own = _own_entity_fingerprint(pipeline, name)
    if encoder is not None or own is None or own != meta.get("encoder_fingerprint"):
        source = encoder or recorded_encoder(meta, kb)
        if not source:
            raise InputError(f"{kb}: its meta.json does not say which encoder built it; give that encoder")
        check_encoder_source(str(source))  # a file, a folder holding no model: one line before any is loaded
        overrides[f"components.{name}.encoder"] = str(source)
    rules = _name_row_paths(name, section)
    if rules and names is None:
        raise InputError(f"{pipeline}: its name-rows rule needs the new KB's name rows "
                         f"(python -m spacy_pel build-names {kb} --output NAMES, then --names NAMES)")
    overrides.update({f"{rule}.names": str(names) for rule in rules})
    return overrides


def retarget(pipeline: PathLike, kb: PathLike, output: PathLike, names: Optional[PathLike] = None,
             encoder: Optional[str] = None, linker: Optional[str] = None) -> Tuple[Language, Dict[str, str]]:
    """Write ``pipeline`` linking against ``kb`` to ``output`` (atomically); returns the pipeline and
    the config overrides it was loaded with. ``linker``: the pel_linker retargeted, required in a pipeline
    with several (one per KB; the others keep theirs). A KB, encoder and name rows that do not belong
    together are refused here (their fingerprints), not at the first document, and an encoder that is a
    file or a folder holding no model before any is loaded. An ``output`` that is a file, or a folder that
    is neither empty nor a pipeline, is refused before anything is read (:func:`check_output`)."""
    check_output(output)
    overrides = linker_overrides(pipeline, kb, names, encoder, linker)
    name = saved_linker(pipeline, linker)[0]
    keys = [key.split(".", 2)[2] for key in overrides]  # kb, encoder, rules.<rule>.names
    keys = [key[: -len(".names")] if key.endswith(".names") else key for key in keys]
    with resources_from_paths(name, keys):  # the folders given, even a KB grown in place since the copy was saved
        nlp = spacy.load(pipeline, config=overrides)
    find_linker(nlp, linker)[1].ensure_loaded()
    with atomic_dir(output) as tmp:
        nlp.to_disk(tmp)
    return nlp, overrides


def labels_without_kb_types(nlp: Language, linker: Optional[str] = None) -> Dict[str, List[str]]:
    """The span labels whose KB types (the label-types rule's map, the NIL classifier's) the pipeline's
    KB has none of, with those types: after a retarget to an ontology with other types (BC5CDR's
    ``Disease → Diseases`` over HPO's ``human_phenotype``) the rule leaves those labels' candidates as
    they are and the NIL classifier sees no fitting type for them — learn a map for the new KB
    (``python -m spacy_pel label-types``) and calibrate again. ``linker``: the pel_linker's name (``None``:
    the first)."""
    name, component = find_linker(nlp, linker)
    component.ensure_loaded()
    kb_types = {t for types in component.index.entities.types.sets for t in types}
    cfg = nlp.config["components"][name]
    maps = [rule.get("label_types") or {} for rule in cfg.get("rules", {}).values()
            if rule.get("@misc") == LABEL_TYPES_RULE]
    maps.append(cfg.get("nil", {}).get("label_types") or {})
    out: Dict[str, List[str]] = {}
    for label_types in maps:
        for label, types in label_types.items():
            if types and not kb_types.intersection(types):
                out.setdefault(label, list(types))
    return out
