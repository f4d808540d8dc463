"""Mention inputs: tokenising a window around each mention gives exactly the whole text's pieces."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

import spacy_pel.models.pieces as pieces
from spacy_pel.models.encoder import MENTION_END, MENTION_START
from spacy_pel.models.pieces import Mention, marked_mentions

WORDS = ["lithium", "carbonate", "induced", "tricuspid", "regurgitation", "of", "the", "(", ")", ",", "-",
         "cardiomyopathy", "Parkinsonism", "naïve", "x1", "a", "ЖЖ", "hydrochlorothiazide", "."]


@pytest.fixture(scope="module")
def tokenizer(tiny_bert):
    tok = AutoTokenizer.from_pretrained(str(tiny_bert))
    tok.add_tokens([MENTION_START, MENTION_END], special_tokens=True)
    return tok


def whole_text(tokenizer, mentions, max_length):
    """The reference: every mention from its whole text's tokenisation."""
    out = []
    for m in mentions:
        enc = tokenizer(m.text, add_special_tokens=False, return_offsets_mapping=True)
        offs = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        lo, hi = pieces._mention_pieces(offs, m.start, m.end)
        out.append(pieces._assemble(tokenizer, [1, 2], enc["input_ids"], lo, hi, max_length - 4))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=120), seps=st.lists(st.sampled_from([" ", "  ", "\n", ""]), min_size=120, max_size=120),
       pick=st.lists(st.tuples(st.integers(0, 119), st.integers(1, 4)), min_size=1, max_size=6),
       max_length=st.sampled_from([8, 12, 16, 32]), per_piece=st.sampled_from([1, 2, 8]))
def test_windows_give_the_whole_texts_pieces(tokenizer, monkeypatch, words, seps, pick, max_length, per_piece):
    # per_piece 1-2: windows far too short, so the whole-text fallback is exercised as well
    monkeypatch.setattr(pieces, "WINDOW_CHARS_PER_PIECE", per_piece)
    text, bounds = "", []
    for w, sep in zip(words, seps):
        text += sep
        bounds.append((len(text), len(text) + len(w)))
        text += w
    mentions = []
    for first, n in pick:
        if first < len(bounds):
            last = min(first + n, len(bounds)) - 1
            mentions.append(Mention(text, bounds[first][0], bounds[last][1]))
    if not mentions:
        return
    assert marked_mentions(tokenizer, [1, 2], mentions, max_length) == whole_text(tokenizer, mentions, max_length)


def test_a_long_text_is_tokenised_only_near_its_mentions(tokenizer, monkeypatch):
    text = " ".join(["lithium carbonate"] * 5000) + " tricuspid regurgitation " + " ".join(["aspirin"] * 5000)
    start = text.index("tricuspid")
    seen = []
    real = pieces._tokenise
    monkeypatch.setattr(pieces, "_tokenise", lambda tok, texts: seen.extend(texts) or real(tok, texts))
    ((ids, span),) = marked_mentions(tokenizer, [1, 2], [Mention(text, start, start + 9)], 16)
    assert max(len(t) for t in seen) < 400  # a window, not the 60,000-character text
    assert [(ids, span)] == whole_text(tokenizer, [Mention(text, start, start + 9)], 16)
