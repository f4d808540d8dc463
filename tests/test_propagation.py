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


def test_the_floor_keeps_out_occurrences_the_span_model_rejects():
    nlp = spacy.blank("en")
    doc = nlp("von Hippel-Lindau disease (VHL) is rare. The VHL gene and VHL tumours.")
    vhl = [t.i for t in doc if t.text == "VHL"]
    found = [(0, 5, 1)]  # "von Hippel-Lindau disease" (the tokenizer keeps "Hippel-Lindau" in three pieces)
    assert doc[0:5].text == "von Hippel-Lindau disease"
    everywhere = propagate(doc, found)
    assert [a for a, b, _ in everywhere[1:]] == vhl
    # the model's probability per span: the gene use (second VHL) is far below the floor
    probs = {(vhl[0], vhl[0] + 1): 0.3, (vhl[1], vhl[1] + 1): 0.001, (vhl[2], vhl[2] + 1): 0.2}
    support = lambda a, b: probs.get((a, b), 0.0)  # noqa: E731
    assert [a for a, b, _ in propagate(doc, found, support, 0.05)[1:]] == [vhl[0], vhl[2]]
    assert propagate(doc, found, support, 0.0) == everywhere  # floor 0: every occurrence, as without support
    assert propagate(doc, found, support, 0.5) == found


def test_line_breaks_and_double_spaces_inside_a_repeat_are_transparent():
    nlp = spacy.blank("en")
    doc = nlp("Familial breast cancer is rare. Breast\ncancer risk and breast  cancer genes. Breast cancer\n")
    assert [t.text for t in doc if t.is_space] == ["\n", " ", "\n"]
    out = propagate(doc, [(1, 3, 4)])  # "breast cancer"
    assert texts(doc, out) == [("breast cancer", 4), ("Breast\ncancer", 4), ("breast  cancer", 4), ("Breast cancer", 4)]
    # and a found span with a line break inside spreads to the plain occurrences
    wrapped = [(i, i + 3, 5) for i in range(len(doc) - 2) if doc[i : i + 3].text == "Breast\ncancer"]
    assert texts(doc, propagate(doc, wrapped))[0] == ("breast cancer", 5)
    assert len(propagate(doc, wrapped)) == 4
