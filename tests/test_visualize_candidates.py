"""The demo page shows each linked mention's NIL confidence beside its id and its top candidates with
scores (on hover, or opened by ``#m<n>``), each linked to the KB, every value escaped."""
import spacy
from spacy.tokens import Span

from spacy_pel.evaluation.visualize import SHOWN, render
from spacy_pel.pipeline.span_data import CANDIDATES_ATTR, CONFIDENCE_ATTR


def linked_doc():
    doc = spacy.blank("en").make_doc("Lithium carbonate toxicity in a newborn .")
    doc.ents = [Span(doc, 0, 2, label="Chemical", kb_id="D016651"), Span(doc, 2, 3, label="Disease", kb_id="D064420")]
    first, second = doc.ents
    first._.set(CANDIDATES_ATTR, [["D016651", "Lithium Carbonate", 1.0]])
    first._.set(CONFIDENCE_ATTR, 1.0)
    second._.set(CANDIDATES_ATTR, [[f"D{n:06d}", f"<b>name {n}</b>", 0.9 - n / 100] for n in range(8)])
    second._.set(CONFIDENCE_ATTR, 0.48636)
    return doc


def test_candidates_scores_and_confidence_are_on_the_page():
    html = render([linked_doc()])
    assert 'id="m0"' in html and 'id="m1"' in html  # page.html#m1 opens mention 1's candidates
    assert '<span class="pel-conf" title="NIL confidence">0.486</span>' in html
    assert "NIL confidence 0.486; candidates:" in html
    assert html.count('href="https://meshb.nlm.nih.gov/record/ui?ui=D0000') == SHOWN  # the top SHOWN of 8, linked
    assert "0.900 " in html and "&lt;b&gt;name 0&lt;/b&gt;" in html and "<b>name" not in html
    assert "name 7" not in html
    assert "mark.entity:hover .pel-cands" in html and 'class="pel-legend"' in html


def test_spans_without_candidates_render_as_before():
    doc = spacy.blank("en").make_doc("Aspirin helps .")
    doc.ents = [Span(doc, 0, 1, label="Chemical", kb_id="D001241")]
    html = render([doc])
    assert 'href="https://meshb.nlm.nih.gov/record/ui?ui=D001241"' in html
    assert 'class="pel-cands"' not in html and 'class="pel-conf"' not in html


def test_a_nil_mention_links_to_no_kb_page_whatever_the_template():
    doc = spacy.blank("en").make_doc("Aspirin and zorblax .")
    doc.ents = [Span(doc, 0, 1, label="Chemical", kb_id="X:1"), Span(doc, 2, 3, label="Chemical", kb_id="OUT")]
    for span, candidates in zip(doc.ents, ([["X:1", "aspirin", 0.9]], [["X:2", "zorb", 0.2]])):
        span._.set(CANDIDATES_ATTR, candidates)
        span._.set(CONFIDENCE_ATTR, 0.1)
    html = render([doc], "https://example.org/e/{}")  # nil_label "OUT": none of the span's candidates
    assert 'href="https://example.org/e/X:1"' in html and "/e/OUT" not in html
    bare = spacy.blank("en").make_doc("zorblax .")
    bare.ents = [Span(bare, 0, 1, label="Chemical", kb_id="NIL")]  # no candidates: the NIL spellings
    assert "/e/NIL" not in render([bare], "https://example.org/e/{}")
