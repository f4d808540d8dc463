import spacy
from spacy.tokens import Span

from spacy_pel.pipeline.abbreviations import (
    abbreviations,
    best_long_form,
    short_form_links,
)

ABBREVIATIONS = {"@misc": "spacy_pel.rules.abbreviations.v1"}
TEXT = ("Effects of retinoic acid (RA) on cells . RA was given with 5-fluorouracil (5-FU) in rats (n = 5) , "
        "then ammonia (NH3) .")


def test_schwartz_hearst_pairs():
    found = abbreviations(TEXT)
    assert found == {"RA": "retinoic acid", "5-FU": "5-fluorouracil"}  # NH3's letters are not in "ammonia"
    assert best_long_form("BP", "we measured blood pressure") == "blood pressure"
    assert best_long_form("XYZ", "nothing matches here") is None


def test_first_definition_wins_and_bad_short_forms_skipped():
    found = abbreviations("heart failure (HF) ... high fat (HF) diet (p < 0.05) and (1998)")
    assert found == {"HF": "heart failure"}


def test_linker_short_form_takes_long_form_candidates(kb_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "rules": {"abbreviations": ABBREVIATIONS}})
    doc = nlp.make_doc("We gave atrial flutter ( AF ) drugs and AF recurred , unlike AF2 .")
    doc.ents = [Span(doc, 2, 4, label="D"), Span(doc, 5, 6, label="D"), Span(doc, 9, 10, label="D"), Span(doc, 13, 14, label="D")]
    spans = [[(e.start, e.end, e.label) for e in doc.ents]]
    lookup, copy_from = short_form_links([doc], spans, [e.text for e in doc.ents])
    assert copy_from == {1: 0, 2: 0} and lookup[3] == "AF2"
    nlp(doc)
    assert doc.ents[1]._.pel_candidates == doc.ents[0]._.pel_candidates == doc.ents[2]._.pel_candidates
    assert doc.ents[1].kb_id_ == doc.ents[0].kb_id_


def test_short_form_without_long_form_mention_uses_long_form_in_alias_table(kb_dir):
    nlp = spacy.blank("en")
    rules = {"abbreviations": ABBREVIATIONS, "aliases": {"@misc": "spacy_pel.rules.alias_table.v1"}}  # in this order
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "rules": rules})
    doc = nlp.make_doc("Patients on acetylsalicylic acid ( ASA ) : ASA helped .")
    doc.ents = [Span(doc, 5, 6, label="C"), Span(doc, 8, 9, label="C")]  # only the short forms are mentions
    assert [e.kb_id_ for e in nlp(doc).ents] == ["D4", "D4"]  # via the KB synonym "acetylsalicylic acid"
