"""Every value that reaches the displaCy page is escaped: KB ids, labels and URLs come from third-party files."""
import pytest
import spacy
from spacy.tokens import Span

from spacy_pel.evaluation.visualize import check_url_template, render
from spacy_pel.files import InputError

EVIL = 'X1"><script>alert(1)</script>'


def test_markup_in_ids_labels_and_text_is_escaped():
    doc = spacy.blank("en").make_doc("Aspirin <b>and</b> warfarin .")
    doc.ents = [Span(doc, 0, 1, label="<i>Chem</i>", kb_id=EVIL), Span(doc, 5, 6, label="Chem", kb_id="D014859")]
    html = render([doc])
    assert "<script>" not in html and "<i>Chem" not in html and "<b>and" not in html
    assert "&lt;script&gt;" in html  # shown, not run
    assert 'href="https://meshb.nlm.nih.gov/record/ui?ui=D014859"' in html  # ordinary ids still link


def test_ids_link_to_their_kb_by_form_and_others_to_nothing():
    doc = spacy.blank("en").make_doc("a b c d e")
    ids = ["MESH:D014859", "OMIM:255800", "HP:0001250", "PROD-42", "D014859|D001241"]
    doc.ents = [Span(doc, i, i + 1, label="X", kb_id=kb_id) for i, kb_id in enumerate(ids)]
    html = render([doc])
    assert 'href="https://meshb.nlm.nih.gov/record/ui?ui=D014859"' in html
    assert 'href="https://omim.org/entry/255800"' in html and 'href="https://hpo.jax.org/browse/term/HP:0001250"' in html
    assert html.count('href="#"') == 2  # a catalogue's own id and a composite one: no made-up link
    assert 'ui=PROD' not in html
    custom = render([doc], "https://example.org/{}")
    assert 'href="https://example.org/PROD-42"' in custom and "meshb" not in custom


def test_a_url_template_is_one_id_field_with_other_braces_doubled():
    doc = spacy.blank("en").make_doc("a b")
    doc.ents = [Span(doc, 0, 1, label="X", kb_id="D014859")]
    for good in ("auto", "https://x.org/{}", "https://x.org/{{x}}/{}?q=1}}"):
        check_url_template(good)
    assert 'href="https://x.org/{x}/D014859"' in render([doc], "https://x.org/{{x}}/{}")
    for bad in ("https://x.org/q?id={}&fmt={fmt}", "https://x.org/{}/{}", "https://x.org/", "https://x.org/{{}}",
                "https://x.org/{0}", "https://x.org/{}{", "https://x.org/}{}", "https://x.org/{:d}"):
        with pytest.raises(InputError, match="needs {} once"):
            check_url_template(bad)
        with pytest.raises(InputError, match="needs {} once"):  # before anything is rendered
            render([doc], bad)
