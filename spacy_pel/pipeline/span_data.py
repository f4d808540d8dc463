"""What a linker leaves on each span it links: ``span._.pel_candidates`` and ``span._.pel_confidence``.

spaCy keeps a span extension's value in ``doc.user_data`` under ``("._.", name, start_char, end_char)``:
two spans of one span group at the same offsets (a multi-label spancat's ``aspirin`` as ``Chemical``
and as ``Disease``, each linked by its own linker against its own KB) would share one value, the last
linker's. So the value is kept under that key *per span label* (``{"pel_by_label": {label: value}}``):
each span reads its own, and spaCy's ``Doc.from_docs``, ``Span.as_doc``, ``doc.copy`` and ``DocBin``
(``store_user_data``) carry it, as they carry any span extension. A value written the plain way (a doc
linked before this module, or set by hand) is read as it is, for every label.

``doc.to_json(underscore=["pel_candidates", "pel_confidence"])`` writes what ``user_data`` holds, so each span's
``value`` there is ``{"pel_by_label": {label: value}}``; ``Doc.from_json`` sets it back through a span without a
label, and a value of that shape is merged into the labels held rather than kept under the label ``""``: the
round trip gives each span its own values back.
"""
from __future__ import annotations

from collections import defaultdict, deque
from functools import partial
from typing import Any, Dict, Sequence, Tuple

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
    if isinstance(value, dict) and BY_LABEL in value:  # the stored form itself (Doc.from_json): its labels, not nested
        by_label.update(value[BY_LABEL])
    else:
        by_label[span.label_] = value
    data[key] = {BY_LABEL: by_label}


# partials of module functions, not closures: spaCy pickles the extensions to spawned processes (n_process)
for _attr in (CANDIDATES_ATTR, CONFIDENCE_ATTR):
    if not Span.has_extension(_attr):
        Span.set_extension(_attr, getter=partial(_get, _attr), setter=partial(_set, _attr))


def attach(final: Sequence[Span], written: Sequence[Span], scores, rows, confidence, named: Dict[int, Tuple[str, str]]) -> None:
    """Set each of the ``final`` spans (as the doc holds them once written) its candidates and confidence: those
    predicted for the ``written`` span of its offsets and label (spaCy sorts ``doc.ents``, and a mention source
    may list its spans in any order); ``named``: KB row → (id, name)."""
    predicted: Dict[tuple, deque] = defaultdict(deque)
    for span, s, r, c in zip(written, scores, rows, confidence):
        predicted[(span.start, span.end, span.label_)].append((s, r, c))
    for span in final:
        queue = predicted.get((span.start, span.end, span.label_))
        if not queue:
            continue  # a span the source kept and did not link (another label's)
        s, r, c = queue.popleft()
        span._.set(CANDIDATES_ATTR, [[*named[j], round(x, 5)] for x, j in zip(s.tolist(), r.tolist()) if j >= 0])
        span._.set(CONFIDENCE_ATTR, round(float(c), 5))
