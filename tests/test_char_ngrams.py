"""spacy_pel.rules.char_ngrams.v1: a character n-gram score of the mention text beside the dense one."""
import numpy as np
import pytest
import spacy
from spacy.tokens import Span

from spacy_pel.pipeline.rules.batch import CandidateBatch
from spacy_pel.pipeline.rules.char_ngrams import CharNgramRule, ngram_cosine
from spacy_pel.retrieval.index import EntityIndex

TEXT = "Li2CO3 toxicity with Atrial flutters and aspirin ."
SPANS = ((0, 1, "Chem"), (3, 5, "Dis"), (6, 7, "Chem"))


def _batch(index, rows, scores, **kw):
    doc = spacy.blank("en").make_doc(TEXT)
    doc.ents = [Span(doc, a, b, label) for a, b, label in SPANS]
    return CandidateBatch([doc], [list(SPANS)], [doc[a:b].text for a, b, _ in SPANS], None, scores.copy(), rows.copy(), index, **kw)


def test_ngram_cosine_is_one_for_equal_text_and_orders_spellings():
    assert ngram_cosine("Aspirin", "aspirin") == pytest.approx(1.0)
    assert ngram_cosine("atrial flutters", "atrial flutter") > ngram_cosine("atrial flutters", "tricuspid regurgitation")
    assert ngram_cosine("x", "y") == 0.0


def test_the_candidate_spelled_like_the_mention_moves_up_by_its_best_name(kb_dir):
    index = EntityIndex.from_disk(kb_dir)
    r = {i: index.lookup[i] for i in ("D1", "D2", "D3", "D4", "D5")}
    rows = np.array([[r["D5"], r["D1"], -1], [r["D2"], r["D3"], -1], [r["D5"], r["D4"], -1]], dtype=np.int64)
    scores = np.array([[0.80, 0.78, 0], [0.80, 0.70, 0], [0.9, 0.5, 0]], dtype=np.float32)
    rule = CharNgramRule(weight=0.2)
    rule.setup(None, index)
    batch = _batch(index, rows, scores, decided={2: r["D5"]})
    rule(batch)
    assert batch.rows[0].tolist() == [r["D1"], r["D5"], -1]  # D1's synonym Li2CO3 is the mention's spelling
    assert batch.rows[1].tolist() == [r["D3"], r["D2"], -1]  # "Atrial flutters" ~ "atrial flutter"
    assert batch.scores[0][0] == pytest.approx(0.78 + 0.2 * 1.0, abs=1e-5)
    assert (batch.rows[2] == rows[2]).all()  # decided: untouched
    batch = _batch(index, rows, scores, matched={0})
    rule(batch)
    assert (batch.rows[0] == rows[0]).all()  # chosen by name: untouched


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="weight"):
        CharNgramRule(weight=-1)
    with pytest.raises(ValueError, match="`n`"):
        CharNgramRule(n=0)
