"""Corpus-level recall for found spans (span_finder.v1's ``lexicon``)."""
import json

import pytest
import spacy
from hypothesis import given, settings
from hypothesis import strategies as st
from spacy.tokens import Doc

from spacy_pel.files import InputError
from spacy_pel.kb import normalize
from spacy_pel.pipeline.lexicon import lexicon_extensions, lexicon_spans, make_lexicon, read_lexicon


def doc_and_support(text, probs):
    doc = spacy.blank("en")(text)
    return doc, (lambda a, b: probs.get(doc[a:b].text, 0.5))


def test_surface_forms_become_mentions_where_free_and_the_model_does_not_reject_them():
    doc, support = doc_and_support("Breast cancer and breast-cancer risk ; the cancer gene ; BREAST CANCER .",
                                   {"cancer": 0.3, "cancer gene": 0.01})
    lexicon = make_lexicon(["breast cancer", "cancer", "Breast-Cancer"])
    assert lexicon.forms == {"breast cancer", "cancer"} and lexicon.firsts == {"breast", "cancer"}  # normalised: case and punctuation fold together
    found = [(0, 2, 7)]  # "Breast cancer" already found: kept as it is, nothing inside it added
    added = lexicon_spans(doc, found, lexicon, 10, support, 0.1)
    assert [doc[a:b].text for a, b in added] == ["breast-cancer", "cancer", "BREAST CANCER"]
    # a floor above a match's probability keeps it out
    assert [doc[a:b].text for a, b in lexicon_spans(doc, found, lexicon, 10, support, 0.4)] == ["breast-cancer", "BREAST CANCER"]
    # "breast-cancer" is 3 tokens: longer than max_len 2, so only the "cancer" inside it matches
    assert [doc[a:b].text for a, b in lexicon_spans(doc, found, lexicon, 2, support, 0.1)] == ["cancer", "cancer", "BREAST CANCER"]
    assert lexicon_spans(doc, found, make_lexicon([]), 10, support, 0.1) == []


def test_of_overlapping_matches_the_more_probable_wins():
    doc, support = doc_and_support("childhood kidney cancer", {"kidney cancer": 0.6, "childhood kidney cancer": 0.3, "cancer": 0.9})
    lexicon = make_lexicon(["kidney cancer", "childhood kidney cancer", "cancer"])
    assert [doc[a:b].text for a, b in lexicon_spans(doc, [], lexicon, 10, support, 0.1)] == ["cancer"]
    doc, support = doc_and_support("childhood kidney cancer", {"kidney cancer": 0.6, "childhood kidney cancer": 0.3, "cancer": 0.2})
    assert [doc[a:b].text for a, b in lexicon_spans(doc, [], lexicon, 10, support, 0.1)] == ["kidney cancer"]


def test_a_match_begins_and_ends_on_a_word():
    doc, support = doc_and_support("galactosemia ( GALT ) .", {"galactosemia (": 0.9})
    lexicon = make_lexicon(["galactosemia"])  # "galactosemia (" normalises to the same form
    assert [doc[a:b].text for a, b in lexicon_spans(doc, [], lexicon, 10, support, 0.1)] == ["galactosemia"]


def test_extensions_replace_the_found_spans_a_longer_surface_form_holds():
    doc, support = doc_and_support("male breast cancer in male patients ; breast and ovarian cancer .",
                                   {"breast and ovarian cancer": 0.05})
    lexicon = make_lexicon(["male breast cancer", "breast cancer", "breast and ovarian cancer", "male patients"])
    # found: "male" + "breast cancer" (two spans the longer form holds), "patients" (inside "male patients"),
    # "ovarian cancer" (inside a form the model gives less than the floor)
    found = [(0, 1, 7), (1, 3, 7), (5, 6, 7), (9, 11, 7)]
    longer = lexicon_extensions(doc, found, lexicon, 10, support, 0.1)
    assert [doc[a:b].text for a, b in longer] == ["male breast cancer", "male patients"]
    assert [doc[a:b].text for a, b in lexicon_extensions(doc, found, lexicon, 10, support, 0.01)][-1] == "breast and ovarian cancer"
    # a form that cuts through a found span replaces nothing ("breast cancer in male" holds only part of "male patients")
    assert lexicon_extensions(doc, [(3, 5, 7)], make_lexicon(["cancer in male patients", "in male"]), 10, support, 0.1) == [(2, 6)]
    assert lexicon_extensions(doc, [(4, 6, 7)], make_lexicon(["in male"]), 10, support, 0.1) == []
    # a found span equal to the form is no extension; nothing found, nothing to extend
    assert lexicon_extensions(doc, [(0, 3, 7)], lexicon, 10, support, 0.1) == []
    assert lexicon_extensions(doc, [], lexicon, 10, support, 0.1) == []


def test_read_lexicon_takes_the_surface_forms_of_an_aliases_file(tmp_path):
    path = tmp_path / "aliases.json"
    path.write_text(json.dumps({"breast cancer": {"D001943": 3}, "(": {"D1": 1}}), encoding="utf8")
    assert read_lexicon(path).forms == {"breast cancer"}  # a wordless form is no mention
    path.write_text("[1, 2]", encoding="utf8")
    with pytest.raises(ValueError, match="aliases.json"):
        read_lexicon(path)


WORDS = ["breast", "cancer", "-", "(", ")", "ataxia", "telangiectasia", "5", "mg", "Na", "+", "of", "the", "X"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=25), st.lists(st.booleans(), min_size=25, max_size=25),
       st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), min_size=1, max_size=6))
def test_matches_are_every_ngram_whose_text_is_a_form(words, spaces, forms):
    """The pruned scan (stop growing an n-gram once its text begins no form) finds exactly what trying
    every n-gram of up to max_len tokens finds."""
    nlp = spacy.blank("en")
    doc = Doc(nlp.vocab, words=words, spaces=spaces[: len(words)])
    lexicon = make_lexicon(" ".join(f) if i % 2 else "".join(f) for i, f in enumerate(forms))
    every = sorted((i, j) for i in range(len(doc)) for j in range(i + 1, min(i + 4, len(doc)) + 1)
                   if any(c.isalnum() for c in doc[i].text) and any(c.isalnum() for c in doc[j - 1].text)
                   and normalize(doc[i].text).split(" ", 1)[0] in lexicon.firsts and normalize(doc[i:j].text) in lexicon.forms)
    found = lexicon_spans(doc, [], lexicon, 4, lambda a, b: 1.0 - 0.01 * (b - a) - 0.001 * a, 0.0)
    # lexicon_spans keeps the more probable of overlapping matches: compare with the same greedy choice over `every`
    taken, want = [False] * len(doc), []
    for i, j in sorted(every, key=lambda m: (-(1.0 - 0.01 * (m[1] - m[0]) - 0.001 * m[0]), m[0], m[1])):
        if not any(taken[i:j]):
            taken[i:j] = [True] * (j - i)
            want.append((i, j))
    assert found == sorted(want)


def test_a_lexicon_that_cannot_be_read_names_the_setting(tmp_path):
    """A missing or non-UTF-8 lexicon was said to be "an alias rule's `aliases`" (session 72 left this alone)."""
    with pytest.raises(InputError, match="span finder's `lexicon`") as missing:
        read_lexicon(tmp_path / "missing.json")
    assert "alias rule" not in str(missing.value)
    (tmp_path / "cp1252.json").write_bytes(b'{"caf\xe9": {"D1": 1}}')
    with pytest.raises(InputError, match=r"cp1252.json:1: .*span finder's `lexicon`"):
        read_lexicon(tmp_path / "cp1252.json")
