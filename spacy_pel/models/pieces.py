"""Word-piece inputs of the two towers (SPEC §1).

Mention: ``[CLS] left-context [M_s] mention [M_e] right-context [SEP]`` in ``max_length`` pieces, the
context split evenly left/right. Entity: ``[CLS] name [SEP] types [SEP] extra text [SEP]``, the extra
text chosen by :func:`entity_text_fields` (synonyms, or the description of an entity without any, by default).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

# what an entity input's third part reads (an encoder's ``entity_text`` setting). The first is the
# default: a trained mention tower links an ontology with definitions (HPO) better against rows written as it
# saw in training, the synonyms (benchmarks/entity_text.md); the second is SPEC §1's BLINK-style description.
ENTITY_TEXTS = ("synonyms_or_description", "description_or_synonyms")


def check_entity_text(entity_text: str) -> None:
    """Refuse a value that is not one of :data:`ENTITY_TEXTS` (``ValueError``)."""
    if entity_text not in ENTITY_TEXTS:
        raise ValueError(f"entity_text must be one of {', '.join(ENTITY_TEXTS)}, not {entity_text!r}")


def entity_text_fields(entity, entity_text: str = ENTITY_TEXTS[0]) -> Tuple[str, str, str]:
    """``(name, types, extra text)`` of a KB entity as its input encodes it: the extra text is its synonyms
    joined by `` ; `` (its description when it has none) for ``"synonyms_or_description"``, its description
    (its synonyms when it has none) for ``"description_or_synonyms"``."""
    check_entity_text(entity_text)
    synonyms = " ; ".join(entity.aliases)
    extra = (synonyms or entity.description) if entity_text == "synonyms_or_description" else (entity.description or synonyms)
    return entity.name, " ; ".join(entity.types), extra


@dataclass
class Mention:
    """A mention to encode: the character span [start, end) of ``text``."""

    text: str
    start: int
    end: int


def entity_pieces(tokenizer, texts: Sequence[Tuple[str, str, str]], max_length: int) -> List[List[int]]:
    """Word-piece ids of ``[CLS] name [SEP] types [SEP] extra text [SEP]`` for each
    ``(name, types, extra text)`` (:func:`entity_text_fields`), at most ``max_length`` pieces (the name first, then types)."""
    tok = tokenizer
    out: List[List[int]] = []
    budget = max_length - 4
    chunk = 4096
    for i in range(0, len(texts), chunk):
        part = texts[i : i + chunk]
        enc = [
            tok([t[j] for t in part], add_special_tokens=False, truncation=True, max_length=budget)[
                "input_ids"
            ]
            for j in range(3)
        ]
        for name, types, desc in zip(*enc):
            name = name[:budget]
            types = types[: budget - len(name)]
            desc = desc[: budget - len(name) - len(types)]
            out.append(
                [tok.cls_token_id, *name, tok.sep_token_id, *types, tok.sep_token_id, *desc, tok.sep_token_id]
            )
    return out


WINDOW_CHARS_PER_PIECE = 8  # characters of text tokenised per word piece of budget, each side of a mention


def _window(text: str, start: int, end: int, reach: int) -> Tuple[int, int]:
    """Characters [a, b) around [start, end): ``reach`` characters each side, cut at whitespace so that
    no word is split (the whole text where no whitespace is near)."""
    a, b = max(0, start - reach), min(len(text), end + reach)
    if a > 0:
        cut = next((i for i in range(a, start) if text[i].isspace()), None)
        a = 0 if cut is None else cut + 1
    if b < len(text):
        cut = next((i for i in range(b, end - 1, -1) if text[i].isspace()), None)
        b = len(text) if cut is None or cut < end else cut
    return a, b


def _first_word_pieces(offsets: np.ndarray, text: str) -> int:
    """How many of a window's pieces belong to its first word (up to the first whitespace)."""
    cut = next((i for i, c in enumerate(text) if c.isspace()), len(text))
    return int(np.searchsorted(offsets[:, 0], cut, side="left"))


def _last_word_pieces(offsets: np.ndarray, text: str) -> int:
    """How many of a window's pieces belong to its last word (after the last whitespace)."""
    cut = next((i for i in range(len(text) - 1, -1, -1) if text[i].isspace()), -1)
    return len(offsets) - int(np.searchsorted(offsets[:, 0], cut + 1, side="left"))


def marked_mentions(
    tokenizer, marker_ids: Sequence[int], mentions: Sequence[Mention], max_length: int
) -> List[Tuple[List[int], Tuple[int, int]]]:
    """Word-piece ids of ``[CLS] left [M_s] mention [M_e] right [SEP]`` for each mention (at most
    ``max_length`` pieces, context split evenly) and the [M_s]..[M_e] positions (inclusive).

    Only a window of the text around each mention is tokenised (whole words, ``WINDOW_CHARS_PER_PIECE``
    characters per piece of budget each side), and a mention is tokenised again in its whole text
    where its window might not hold all the context it takes, so the pieces are the whole text's: a
    window's first and last words, which a tokeniser may cut differently out of context, are never
    used. Identical windows are tokenised once.
    """
    budget = max_length - 4
    reach = WINDOW_CHARS_PER_PIECE * max_length
    for m in mentions:
        if not (0 <= m.start < m.end <= len(m.text)):
            raise ValueError(f"mention offsets ({m.start}, {m.end}) outside a text of {len(m.text)} chars")
    windows = [_window(m.text, m.start, m.end, reach) for m in mentions]
    chosen: List[Optional[List[int]]] = [None] * len(mentions)
    texts = [m.text[a:b] for m, (a, b) in zip(mentions, windows)]
    for n, (m, (a, b), (ids, offs)) in enumerate(zip(mentions, windows, _tokenise(tokenizer, texts))):
        lo, hi = _mention_pieces(offs, m.start - a, m.end - a)
        rest = budget - min(hi - lo, budget)
        whole_left = a == 0 or lo - _first_word_pieces(offs, texts[n]) >= rest
        whole_right = b == len(m.text) or len(ids) - hi - _last_word_pieces(offs, texts[n]) >= rest
        if whole_left and whole_right:
            chosen[n] = _assemble(tokenizer, marker_ids, ids, lo, hi, budget)
    again = [n for n, c in enumerate(chosen) if c is None]
    for n, (ids, offs) in zip(again, _tokenise(tokenizer, [mentions[n].text for n in again])):
        lo, hi = _mention_pieces(offs, mentions[n].start, mentions[n].end)
        chosen[n] = _assemble(tokenizer, marker_ids, ids, lo, hi, budget)
    return chosen


def _tokenise(tokenizer, texts: Sequence[str]) -> List[Tuple[List[int], np.ndarray]]:
    """(piece ids, character offsets) of each text, each distinct text tokenised once."""
    by_text: Dict[str, int] = {}
    for t in texts:
        by_text.setdefault(t, len(by_text))
    if not by_text:
        return []
    encoded = tokenizer(list(by_text), add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    done = [(ids, np.asarray(o, dtype=np.int64).reshape(-1, 2))
            for ids, o in zip(encoded["input_ids"], encoded["offset_mapping"])]
    return [done[by_text[t]] for t in texts]


def _mention_pieces(offsets: np.ndarray, start: int, end: int) -> Tuple[int, int]:
    """The pieces [lo, hi) overlapping characters [start, end)."""
    lo = int(np.searchsorted(offsets[:, 1], start, side="right"))
    hi = int(np.searchsorted(offsets[:, 0], end, side="left"))
    return min(lo, hi), hi


def _assemble(tokenizer, marker_ids, ids: List[int], lo: int, hi: int, budget: int) -> Tuple[List[int], Tuple[int, int]]:
    """The marked input of the mention at pieces [lo, hi) of ``ids``, context split evenly."""
    mention = ids[lo:hi][:budget]
    rest = budget - len(mention)
    left_n = min(lo, rest // 2)
    right_n = min(len(ids) - hi, rest - left_n)
    left_n = min(lo, rest - right_n)
    left = ids[lo - left_n : lo]
    right = ids[hi : hi + right_n]
    seq = [tokenizer.cls_token_id, *left, marker_ids[0], *mention, marker_ids[1], *right, tokenizer.sep_token_id]
    return seq, (1 + len(left), 2 + len(left) + len(mention))
