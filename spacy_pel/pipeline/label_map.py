"""The span label → KB types map of ``spacy_pel.rules.label_types.v1``, learned from annotated text.

``configs/linker_rules.cfg`` writes it by hand for BC5CDR + MeSH (``Chemical`` → ``Chemicals and
Drugs``, ``Disease`` → ``Diseases``, ``Psychiatry and Psychology``). For another corpus and KB,
:func:`learn_label_types` counts, per span label, the KB types of the gold entities (ids resolved in
the KB, alternative ids too) and keeps, greedily, the types that cover most of them: first the type
held by most of the label's in-KB mentions, then the one adding most of the mentions not covered yet,
until ``coverage`` of them are covered or the next type would add less than ``min_share``. A label
whose in-KB mentions have no KB type is left out (the rule leaves it alone).

:func:`write_linker_config` writes a pipeline config with a map inlined (what ``spacy assemble`` then
builds, so the saved pipeline carries it); a config override does the same for one label:
``--components.pel_linker.rules.label_types.label_types.Disease '["Diseases"]'``.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

from confection import Config
from spacy.tokens import Doc

from .. import files
from ..corpora import gold_ids, gold_spans
from ..retrieval.index import EntityIndex

LabelTypes = Dict[str, List[str]]


def _mention_types(docs: Iterable[Doc], index: EntityIndex) -> Tuple[Dict[str, List[frozenset]], Counter]:
    """Per label, the KB types of each in-KB gold mention's entity; and per label, the mentions seen."""
    types: Dict[str, List[frozenset]] = {}
    seen: Counter = Counter()
    for doc in docs:
        for span in gold_spans(doc):
            if not span.label_:
                continue
            seen[span.label_] += 1
            row = next((r for r in map(index.resolve, gold_ids(span.kb_id_)) if r is not None), None)
            if row is not None:
                types.setdefault(span.label_, []).append(frozenset(index.entities.types[row]))
    return types, seen


def _cover(sets: List[frozenset], coverage: float, min_share: float) -> Tuple[List[str], List[dict]]:
    """Types chosen greedily to cover ``coverage`` of ``sets``; with each type's share and the running coverage."""
    left, chosen, steps, total = list(sets), [], [], len(sets)
    while left and (total - len(left)) < coverage * total:
        counts = Counter(t for s in left for t in s)
        if not counts:
            break
        best, n = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))  # ties: alphabetical, reproducible
        if n < min_share * total:
            break
        chosen.append(best)
        left = [s for s in left if best not in s]
        steps.append({"type": best, "adds": round(n / total, 4), "covered": round(1 - len(left) / total, 4)})
    return chosen, steps


def learn_label_types(docs: Iterable[Doc], index: EntityIndex, coverage: float = 0.95,
                      min_share: float = 0.01) -> Tuple[LabelTypes, dict]:
    """The label → KB types map of ``docs``' gold mentions in ``index``'s KB, and a report per label
    (mentions, in-KB mentions, the chosen types with what each adds, the coverage reached)."""
    if not 0 < coverage <= 1 or not 0 <= min_share < 1:
        raise ValueError(f"coverage must be in (0, 1] and min_share in [0, 1), not {coverage}, {min_share}")
    types, seen = _mention_types(docs, index)
    label_types: LabelTypes = {}
    report: dict = {}
    for label in sorted(seen):
        sets = types.get(label, [])
        chosen, steps = _cover(sets, coverage, min_share)
        report[label] = {"mentions": seen[label], "in_kb": len(sets), "types": steps,
                         "covered": steps[-1]["covered"] if steps else 0.0}
        if chosen:
            label_types[label] = chosen
    return label_types, report


def read_label_types(path: files.PathLike) -> LabelTypes:
    """A label → KB types map from a JSON file (``{"Disease": ["Diseases"]}``), checked; a file that is not
    UTF-8 or not JSON is refused as ``FILE:LINE: reason``, as every reader words it."""
    path = Path(path)
    try:
        data = json.loads(files.read_text(path))
    except files.LineError as err:  # FILE:LINE: not UTF-8 text (byte 0x.. at column N)
        raise files.InputError(f"{err} (a label → KB types map: UTF-8 JSON)") from None
    except json.JSONDecodeError as err:
        raise files.InputError(f"{path}:{err.lineno}: not a readable JSON label → KB types map ({err.msg})") from err
    except OSError as err:
        raise files.InputError(f"{path}: not a readable JSON label → KB types map ({err})") from err
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(t, str) for t in v) for k, v in data.items()
    ):
        raise files.InputError(f'{path}: expected a JSON object mapping each span label to a list of KB types, e.g. {{"Disease": ["Diseases"]}}')
    return data


def write_linker_config(config: files.PathLike, label_types: LabelTypes,
                        output: files.PathLike, component: Optional[str] = None) -> str:
    """Copy the pipeline config ``config`` to ``output`` with ``label_types`` as the map of its
    ``label_types`` rule (replacing the one it had); returns the component's name."""
    # read as every config of the package: a byte-order mark skipped, a byte that is not UTF-8 named by line
    cfg = Config().from_str(files.read_text(config).replace("\r\n", "\n").replace("\r", "\n"), interpolate=False)
    names = [n for n, c in cfg.get("components", {}).items()
             if c.get("factory") == "pel_linker" and "label_types" in c.get("rules", {})]
    if component is not None:
        names = [n for n in names if n == component]
    if len(names) != 1:
        raise files.InputError(f"{config}: expected one pel_linker component with a [rules.label_types] rule, found {len(names)}")
    cfg["components"][names[0]]["rules"]["label_types"]["label_types"] = {k: list(v) for k, v in label_types.items()}
    files.atomic_write(output, lambda tmp: cfg.to_disk(tmp))
    return names[0]
