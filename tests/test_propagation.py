"""Document-level consistency of found spans (span_finder.v1's ``propagate``)."""
import spacy

from spacy_pel.pipeline.propagation import propagate

TEXT = ("Effects of butylated hydroxyanisole (BHA) on rats. BHA caused forestomach tumors. "
        "Butylated hydroxyanisole is an antioxidant; the tumors grew. A BHA-free diet.")


def texts(doc, spans):
    return [(doc[a:b].text, label) for a, b, label in spans]


def test_short_forms_and_repeats_of_found_spans_become_mentions():
    nlp = spacy.blank("en")
    doc = nlp(TEXT)
    start = [t.i for t in doc if t.text == "butylated"][0]
    tumors = [t.i for t in doc if t.text == "tumors"][0]
    found = [(start, start + 2, 7), (tumors - 1, tumors + 1, 9)]  # "butylated hydroxyanisole", "forestomach tumors"
    out = propagate(doc, found)
    assert texts(doc, out) == [("butylated hydroxyanisole", 7), ("BHA", 7), ("BHA", 7), ("forestomach tumors", 9),
                               ("Butylated hydroxyanisole", 7), ("BHA", 7)]  # the last from "BHA-free": BHA - free
    # found spans are kept as they are and come back in document order; "tumors" alone is not a found mention
    assert set(found) <= set(out) and out == sorted(out)
    # without the long form found, the short form is not a mention
    assert texts(doc, propagate(doc, [found[1]])) == [("forestomach tumors", 9)]


def test_a_new_span_never_overlaps_a_found_one_and_wordless_ones_do_not_spread():
    nlp = spacy.blank("en")
    doc = nlp("lithium carbonate and lithium ; lithium , 5 and 5")
    found = [(0, 2, 1), (3, 4, 2), (7, 8, 3)]  # "lithium carbonate", "lithium", "5"
    out = propagate(doc, found)
    # "lithium" inside the found "lithium carbonate" stays as it was; the free "lithium" at 5 is added
    assert out == [(0, 2, 1), (3, 4, 2), (5, 6, 2), (7, 8, 3)]
    assert propagate(doc, []) == []
