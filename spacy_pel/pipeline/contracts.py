"""The typed contracts of ``pel_linker``'s parts, checked when the component is made.

Each part chosen in the config (``[components.pel_linker.mentions]``, ``.vectors``, ``.rules.NAME``,
``.nil``) is a registered function's result; the component calls it in a fixed way, so a part of your
own must have that shape. :func:`check_part` refuses one that does not, at construction, with a
message naming the part (``pel_linker: `nil` …``), instead of failing on the first document.

* :class:`MentionSource` — where the mentions come from (:mod:`.mentions`): ``label_from_kb``,
  ``spans(doc)``, ``find(docs, encoder, batch_size)`` → (per doc ``[(start, end, label)]``, the
  documents' token vectors or None) and ``write(doc, spans)`` → bool; a source whose found spans have
  no label (``label_from_kb`` true) also has ``label_for(types)``.
* :class:`VectorStrategy` — how mention vectors are made (:mod:`.vectors`):
  ``strategy(encoder, docs, spans, batch_size, hidden)`` → ``[n, dim]`` float32.
* :class:`CandidateRule` — a candidate rule (:mod:`.rules`): ``rule(batch)`` edits the
  :class:`.rules.CandidateBatch` in place; optionally ``prepare(batch)`` (:class:`PreparingRule`),
  run before any vector is computed.
* :class:`NilStrategy` — how NIL is decided (:mod:`.nil`): ``nil(features)`` → one confidence per
  mention, and ``label_types`` (span label → KB types, may be empty) for the ``type`` evidence;
  optionally ``lexical`` (bool, False when absent): whether ``features`` must hold the ``chars`` and
  ``words`` columns (they cost a KB record read per mention, so they are 0 unless asked for).

A part that holds data is also a :class:`.config.LinkerPart`.
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple, runtime_checkable

import numpy as np


@runtime_checkable
class MentionSource(Protocol):
    label_from_kb: bool

    def spans(self, doc: Any) -> Sequence[Any]: ...

    def find(self, docs: Sequence[Any], encoder: Any, batch_size: int) -> Tuple[List[list], Optional[list]]: ...

    def write(self, doc: Any, spans: List[Any]) -> bool: ...


@runtime_checkable
class VectorStrategy(Protocol):
    def __call__(self, encoder: Any, docs: Sequence[Any], spans: Sequence[list], batch_size: int,
                 hidden: Optional[list]) -> np.ndarray: ...


@runtime_checkable
class CandidateRule(Protocol):
    def __call__(self, batch: Any) -> None: ...


@runtime_checkable
class PreparingRule(CandidateRule, Protocol):
    def prepare(self, batch: Any) -> None: ...


@runtime_checkable
class NilStrategy(Protocol):
    label_types: Dict[str, Sequence[str]]
    # optional, not checked: ``lexical: bool`` — the strategy reads the lexical features (default False)

    def __call__(self, features: np.ndarray) -> np.ndarray: ...


# per contract: (method, number of positional arguments it is called with)
_CALLS = {
    MentionSource: (("spans", 1), ("find", 3), ("write", 2)),
    VectorStrategy: (("__call__", 5),),
    CandidateRule: (("__call__", 1), ("prepare", 1)),
    NilStrategy: (("__call__", 1),),
}
_DATA = {MentionSource: ("label_from_kb",), NilStrategy: ("label_types",)}
_WHAT = {MentionSource: "a mention source", VectorStrategy: "a vector strategy", CandidateRule: "a candidate rule",
         NilStrategy: "a NIL strategy"}


def _takes(function, n: int) -> bool:
    """Whether ``function`` can be called with ``n`` positional arguments (True when unknown)."""
    try:
        inspect.signature(function).bind(*([None] * n))
    except TypeError:
        return False
    except ValueError:  # no signature (some builtins)
        return True
    return True


def label_types_ok(label_types) -> bool:
    """A map of span labels to lists of KB types (a string value would be read as its letters)."""
    return isinstance(label_types, dict) and all(
        isinstance(v, (list, tuple)) and all(isinstance(t, str) for t in v) for v in label_types.values())


def contract_problems(value, contract: type) -> List[str]:
    """What ``value`` lacks to fulfil ``contract`` (empty: it does)."""
    problems = [f"it has no `{name}`" for name in _DATA.get(contract, ()) if not hasattr(value, name)]
    for name, n in _CALLS[contract]:
        if name == "prepare" and not hasattr(value, "prepare"):
            continue  # optional
        method = value if name == "__call__" else getattr(value, name, None)
        if method is None or not callable(method):
            problems.append("it is not callable" if name == "__call__" else f"its `{name}` is missing or not callable")
        elif not _takes(method, n):
            call = "it" if name == "__call__" else f"its `{name}`"
            problems.append(f"{call} cannot be called with {n} argument{'s' if n > 1 else ''}")
    if contract is NilStrategy and hasattr(value, "label_types") and not label_types_ok(value.label_types):
        problems.append(f"its `label_types` must map span labels to lists of KB types, not {value.label_types!r}")
    if contract is MentionSource and getattr(value, "label_from_kb", False) and not callable(getattr(value, "label_for", None)):
        problems.append("it sets `label_from_kb` but has no `label_for(types)`")
    return problems


def check_part(value, what: str, contract: type, example: str):
    """``value`` if it fulfils ``contract``; else a ValueError naming the part (``what``: ``nil``,
    ``rules.aliases`` …), what it lacks, and an ``example`` of a registered block."""
    problems = contract_problems(value, contract)
    if problems:
        raise ValueError(
            f"pel_linker: `{what}` must be {_WHAT[contract]} ({contract.__name__}, spacy_pel/pipeline/contracts.py), "
            f"such as the block {example}; {'; '.join(problems)}: {value!r}"
        )
    return value
