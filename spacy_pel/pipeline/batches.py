"""How ``pel_linker`` links a batch of docs: Python's cyclic garbage collector paused meanwhile, and a batch
that fails handed to the component's error handler (``nlp.set_error_handler``: by default it re-raises;
:func:`spacy.util.ignore_error` leaves the batch out), as spaCy's own components do."""
from __future__ import annotations

import contextlib
import gc
from typing import Sequence

from spacy.tokens import Doc


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector paused while a batch is linked (as it was before, after): the
    batch allocates many small lists and spans, and each full collection would walk the ~0.5M objects
    that spaCy, torch and transformers keep (~6% of the MEDIC fast preset's time). The batch's own
    garbage is collected once the collector runs again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def link_batch(component, docs: Sequence[Doc]) -> bool:
    """``component.predict`` then ``set_annotations`` on ``docs``; True when they are linked, False when
    they failed and the component's error handler let them go (its default raises)."""
    try:
        with gc_paused():
            component.set_annotations(docs, component.predict(docs))
        return True
    except Exception as err:  # noqa: BLE001 - spaCy's error handler decides (TrainablePipe.pipe does the same)
        component.get_error_handler()(component.name, component, list(docs), err)
        return False
