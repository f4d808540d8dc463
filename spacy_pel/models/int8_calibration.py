"""The fixed inputs that set the int8 towers' activation ranges (static quantisation).

Dynamic quantisation measures each batch's activation range as it runs, so a mention's vector depended
on what it was batched with (172 of 9,591 BC5CDR dev ids changed between two batch settings).
Static quantisation measures the ranges once, on fixed inputs, and keeps them: each token's
activations are then quantised alone, and a mention's vector is the same in any batch.

The inputs are ``data/int8_calibration.jsonl``: the first 20 documents of BC5CDR's training set
(public domain, NLM) with their 304 chemical and disease mentions (``python
benchmarks/int8_calibration_set.py`` writes it), given to each tower in the form it reads:

* the mention tower: each mention in its context, between the mention markers;
* the entity tower: each mention's text as a name (``[CLS] text [SEP]``: the name rows and the
  mention-text pass), and as an entity input (``text [SEP] type [SEP] the text around it``: KB rows).

Inputs of one length are batched together, so no padding enters the ranges.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Callable, List, Sequence, Tuple

from .pieces import Mention, entity_pieces

CALIBRATION_FILE = Path(__file__).with_name("data") / "int8_calibration.jsonl"
CONTEXT_CHARS = 200  # text each side of a mention in its entity-style input

Document = Tuple[str, Tuple[Tuple[int, int, str], ...]]  # text, (start, end, type) of each mention
MentionInputs = Callable[[Sequence[Mention]], List[Tuple[List[int], Tuple[int, int]]]]


@lru_cache(maxsize=1)
def calibration_documents() -> Tuple[Document, ...]:
    """The bundled documents and their mentions."""
    rows = [json.loads(line) for line in CALIBRATION_FILE.read_text(encoding="utf8").splitlines() if line.strip()]
    return tuple((r["text"], tuple((int(a), int(b), str(t)) for a, b, t in r["mentions"])) for r in rows)


def mention_sequences(mention_inputs: MentionInputs) -> List[List[int]]:
    """The mention tower's calibration inputs: word-piece ids made by the encoder's ``mention_inputs``."""
    mentions = [Mention(text, a, b) for text, spans in calibration_documents() for a, b, _ in spans]
    return [ids for ids, _ in mention_inputs(mentions)]


def entity_sequences(tokenizer, max_length: int) -> List[List[int]]:
    """The entity tower's calibration inputs: each mention's text as a name, and as an entity input."""
    names, rows = [], []
    for text, spans in calibration_documents():
        for a, b, kind in spans:
            pieces = tokenizer(text[a:b], add_special_tokens=False, truncation=True, max_length=max_length - 2)
            names.append([tokenizer.cls_token_id, *pieces["input_ids"], tokenizer.sep_token_id])
            rows.append((text[a:b], kind, text[max(0, a - CONTEXT_CHARS) : b + CONTEXT_CHARS]))
    return names + entity_pieces(tokenizer, rows, max_length)
