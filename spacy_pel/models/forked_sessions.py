"""ONNX Runtime copies of the towers across a fork: a forked child never runs nor frees one its parent made.

An ``onnxruntime.InferenceSession``'s intra-op thread pool does not survive ``fork``. In the child, running
the parent's session, or freeing it (its destructor waits for pool threads that do not exist there), would
wait forever. Every ONNX copy a process makes is registered here (weakly, so that the process that made it
frees it as usual). At a fork the child takes a strong reference to each registered copy and keeps it for
its whole life. :func:`drop_inherited` then takes those copies out of a runtime cache, and the child makes
its own. This covers spaCy's ``nlp.pipe(n_process=N)`` under fork and a user's own pool.
"""
from __future__ import annotations

import os
import weakref
from typing import Dict

_MADE: "weakref.WeakSet[object]" = weakref.WeakSet()  # the ONNX copies this process made and still holds
_INHERITED: Dict[int, object] = {}  # id -> a copy a parent process made: held here, never run nor freed


def made_here(copy: object) -> object:
    """Register ``copy`` (an ONNX Runtime copy of a tower) as made by this process, and return it."""
    _MADE.add(copy)
    return copy


def drop_inherited(cache: Dict) -> None:
    """Take the copies a parent process made out of ``cache`` (``{key: (weights version, copy)}``): this process
    makes its own. The copies stay referenced (:data:`_INHERITED`), so their destructors never run here."""
    for key in [key for key, (_, copy) in cache.items() if id(copy) in _INHERITED]:
        del cache[key]


def inherited(copy: object) -> bool:
    """Whether ``copy`` was made by a parent process (this one is a forked child): never to be run here."""
    return id(copy) in _INHERITED


def _hold_inherited() -> None:
    """In a forked child: every copy the parent made is inherited, kept for the child's life and never run."""
    for copy in list(_MADE):
        _INHERITED[id(copy)] = copy
    _MADE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_hold_inherited)
