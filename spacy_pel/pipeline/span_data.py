"""What a linker leaves on each span it links: ``span._.pel_candidates`` and ``span._.pel_confidence``.

spaCy keeps a span extension's value in ``doc.user_data`` under ``("._.", name, start_char, end_char)``:
two spans of one span group at the same offsets (a multi-label spancat's ``aspirin`` as ``Chemical``
and as ``Disease``, each linked by its own linker against its own KB) would share one value, the last
linker's. So the value is kept under that key *per span label* (``{"pel_by_label": {label: value}}``):
each span reads its own, and spaCy's ``Doc.from_docs``, ``Span.as_doc``, ``doc.copy`` and ``DocBin``
(``store_user_data``) carry it, as they carry any span extension. A value written the plain way (a doc
linked before this module, or set by hand) is read as it is, for every label.
"""
from __future__ import annotations

from functools import partial
from typing import Any

from spacy.tokens import Span

CANDIDATES_ATTR = "pel_candidates"  # [[id, name, score], ...], best first
CONFIDENCE_ATTR = "pel_confidence"  # the NIL strategy's confidence: NIL below the threshold
BY_LABEL = "pel_by_label"


def _key(span: Span, name: str) -> tuple:
    return ("._.", name, span.start_char, span.end_char)


def _as_lists(value: Any) -> Any:
    """A value as it was set: a ``DocBin`` (msgpack) gives lists back as tuples, ``[[id, name, score]]``
    as ``((id, name, score),)``."""
    return [_as_lists(v) for v in value] if isinstance(value, tuple) else value


def _get(name: str, span: Span) -> Any:
    value = span.doc.user_data.get(_key(span, name))
    if isinstance(value, dict) and BY_LABEL in value:
        return _as_lists(value[BY_LABEL].get(span.label_))
    return _as_lists(value)


def _set(name: str, span: Span, value: Any) -> None:
    data, key = span.doc.user_data, _key(span, name)
    held = data.get(key)
    by_label = dict(held[BY_LABEL]) if isinstance(held, dict) and BY_LABEL in held else {}
    by_label[span.label_] = value
    data[key] = {BY_LABEL: by_label}


# partials of module functions, not closures: spaCy pickles the extensions to spawned processes (n_process)
for _attr in (CANDIDATES_ATTR, CONFIDENCE_ATTR):
    if not Span.has_extension(_attr):
        Span.set_extension(_attr, getter=partial(_get, _attr), setter=partial(_set, _attr))
