"""Every value that reaches the displaCy page is escaped: KB ids, labels and URLs come from third-party files."""
import spacy
from spacy.tokens import Span

from spacy_pel.evaluation.visualize import render

EVIL = 'X1"><script>alert(1)</script>'


def test_markup_in_ids_labels_and_text_is_escaped():
    doc = spacy.blank("en").make_doc("Aspirin <b>and</b> warfarin .")
    doc.ents = [Span(doc, 0, 1, label="<i>Chem</i>", kb_id=EVIL), Span(doc, 5, 6, label="Chem", kb_id="D014859")]
    html = render([doc])
    assert "<script>" not in html and "<i>Chem" not in html and "<b>and" not in html
    assert "&lt;script&gt;" in html  # shown, not run
    assert 'href="https://meshb.nlm.nih.gov/record/ui?ui=D014859"' in html  # ordinary ids still link
