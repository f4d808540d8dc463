"""How a span's label finds its entry in a map keyed by span labels (the ``label_types`` rule's and the
NIL classifier's span label → KB types).

Exactly; else the key it equals case aside; else the one key whose name it contains, or which contains
it, case aside (both at least three characters long). So the labels other NERs and corpora give the same
classes are understood by a map written for one corpus: scispaCy's ``CHEMICAL`` / ``DISEASE``, BioRED's ``ChemicalEntity`` /
``DiseaseOrPhenotypicFeature`` and NCBI disease's ``SpecificDisease`` / ``DiseaseClass`` find BC5CDR's
``Chemical`` and ``Disease`` (without it they had no type: BC5CDR dev R@1 −0.75 pt and three times the NIL
decisions, ``benchmarks/label_names.md``). A label that fits no key, or several (``ChemicalDisease``
against ``Chemical`` and ``Disease``), has no entry.
"""
from __future__ import annotations

from typing import Dict, Iterable, Optional, TypeVar

V = TypeVar("V")
MIN_PART = 3  # a key and a label shorter than this are matched whole only (``C`` is in too many names)


def find_label(label: str, keys: Iterable[str]) -> Optional[str]:
    """The key of ``keys`` that span label ``label`` names (see the module), or None."""
    keys = [k for k in keys if k]
    if label in keys:
        return label
    folded = label.casefold()
    if not folded:
        return None
    contains = (lambda k: min(len(k), len(folded)) >= MIN_PART and (k.casefold() in folded or folded in k.casefold()))
    for fits in (lambda k: k.casefold() == folded, contains):
        found = [k for k in keys if fits(k)]
        if found:
            return found[0] if len(found) == 1 else None
    return None


class LabelMap(Dict[str, V]):
    """A dict keyed by span labels whose :meth:`for_label` also finds the entry of a label named otherwise
    (:func:`find_label`, remembered per label)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._keys: Dict[str, Optional[str]] = {}

    def key_for(self, label: str) -> Optional[str]:
        """The key whose entry is span label ``label``'s, or None."""
        if label not in self._keys:
            self._keys[label] = find_label(label, self)
        return self._keys[label]

    def for_label(self, label: str) -> Optional[V]:
        """Span label ``label``'s entry, or None."""
        key = self.key_for(label)
        return None if key is None else self[key]
