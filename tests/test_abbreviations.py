import spacy
from spacy.tokens import Span

from spacy_pel.pipeline.abbreviations import (
    abbreviations,
    best_long_form,
    initials_long_form,
    short_form_links,
    undefined_short_form,
    undefined_short_form_links,
)

ABBREVIATIONS = {"@misc": "spacy_pel.rules.abbreviations.v1"}
TEXT = ("Effects of retinoic acid (RA) on cells . RA was given with 5-fluorouracil (5-FU) in rats (n = 5) , "
        "then ammonia (NH3) .")


def test_schwartz_hearst_pairs():
    found = abbreviations(TEXT)
    assert found == {"RA": "retinoic acid", "5-FU": "5-fluorouracil"}  # NH3's letters are not in "ammonia"
    assert best_long_form("BP", "we measured blood pressure") == "blood pressure"
    assert best_long_form("XYZ", "nothing matches here") is None


def test_short_form_of_the_long_forms_initials_in_another_order():
    """``myotonic dystrophy (DM)`` (Latin *dystrophia myotonica*): Schwartz & Hearst find no long form;
    the words' initials match the short form's letters, so it is a definition; other letters are not."""
    assert best_long_form("DM", "in 1990 Myotonic dystrophy") is None
    assert abbreviations("in 1990 Myotonic dystrophy (DM) and DM kinase") == {"DM": "Myotonic dystrophy"}
    assert abbreviations("in 1990 Myotonic dystrophy (DX)") == {}  # other letters
    assert initials_long_form("dm", "in 1990 Myotonic dystrophy") is None  # two capitals or more


def test_words_whose_initials_spell_the_short_form_are_its_long_form():
    """Schwartz & Hearst's shortest match takes a later letter of a word for the short form's first
    (``multiple myeloma (MM)`` → ``myeloma``); the words whose initials spell it win."""
    assert best_long_form("MM", "patients with multiple myeloma") == "myeloma"
    assert abbreviations("patients with multiple myeloma (MM) and MM cells") == {"MM": "multiple myeloma"}
    text = "a mild form called attenuated adenomatous polyposis coli (AAPC) ."
    assert abbreviations(text) == {"AAPC": "attenuated adenomatous polyposis coli"}
    assert abbreviations("and adenomatous polyposis coli (APC) .") == {"APC": "adenomatous polyposis coli"}
    assert initials_long_form("MM", "with multiple myeloma", in_order=True) == "multiple myeloma"
    assert initials_long_form("MM", "with myeloma multiple", in_order=True) == "myeloma multiple"  # same letters
    assert initials_long_form("AB", "with beta alpha", in_order=True) is None  # not in this order
    assert initials_long_form("mm", "with multiple myeloma", in_order=True) is None  # two capitals or more


def test_first_definition_wins_and_bad_short_forms_skipped():
    found = abbreviations("heart failure (HF) ... high fat (HF) diet (p < 0.05) and (1998)")
    assert found == {"HF": "heart failure"}
    # a short form with more in its parentheses: two capitals or more ("morphine (mu, 3)" is no definition)
    found = abbreviations("with diethylnitrosamine (DEN: 10 mg/kg/day) or alfentanil (ALF; n = 3), morphine (mu, 3 mg)")
    assert found == {"DEN": "diethylnitrosamine", "ALF": "alfentanil"}


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


def test_short_form_takes_the_mention_of_its_label_inside_its_long_form():
    """``ribavirin-induced hemolytic anemia (RIHA)``: no mention has the long form's text, but the Disease
    mention inside it, the long form's head, is what RIHA means."""
    nlp = spacy.blank("en")
    text = "Ribavirin-induced hemolytic anemia (RIHA) and RIHA again; tri-ortho-tolyl  phosphate (TOTP) ."
    doc = nlp.make_doc(text)

    def mentions(*pairs):
        spans = []
        for words, label, nth in pairs:
            start = -1
            for _ in range(nth + 1):
                start = text.index(words, start + 1)
            spans.append(doc.char_span(start, start + len(words), label=label))
        return [[(sp.start, sp.end, sp.label_) for sp in spans]], [sp.text for sp in spans]

    spans, texts = mentions(("Ribavirin", "Chemical", 0), ("hemolytic anemia", "Disease", 0), ("RIHA", "Disease", 0),
                            ("RIHA", "Disease", 1), ("TOTP", "Chemical", 0))
    lookup, copy_from = short_form_links([doc], spans, texts)
    assert copy_from == {2: 1, 3: 1}  # both RIHAs → "hemolytic anemia", not the Chemical "Ribavirin"
    assert lookup[4] == "tri-ortho-tolyl phosphate"  # no mention inside that long form: looked up by it
    spans, texts = mentions(("Ribavirin", "Chemical", 0), ("hemolytic anemia", "Chemical", 0), ("RIHA", "Chemical", 0))
    assert short_form_links([doc], spans, texts)[1] == {2: 1}  # the long form's head before another mention in it
    spans, texts = mentions(("Ribavirin", "Chemical", 0), ("hemolytic anemia", "Disease", 0), ("RIHA", "Chemical", 0))
    assert short_form_links([doc], spans, texts)[1] == {2: 0}  # else a mention of its label inside it
    spans, texts = mentions(("hemolytic anemia", "Disease", 0), ("RIHA", "Chemical", 0))
    lookup, copy_from = short_form_links([doc], spans, texts)
    assert copy_from == {} and lookup[1] == "Ribavirin-induced hemolytic anemia"  # no mention of its label in it


def test_undefined_short_forms_take_their_long_form_mention(kb_dir):
    """OAB, never defined in the text, is the long form of the one Disease mention overactive bladder."""
    nlp = spacy.blank("en")
    doc = nlp.make_doc("Women with overactive bladder improved ; OAB and OABs and Oab , ob and HF persisted ; "
                       "heart failure , high fat and overactive bladder .")
    words = [t.text for t in doc]

    def span(text, label, nth=0):
        n = len(text.split())
        starts = [i for i in range(len(words)) if words[i : i + n] == text.split()]
        return (starts[nth], starts[nth] + n, label)

    spans = [[span("overactive bladder", "D"), span("OAB", "D"), span("OABs", "D"), span("Oab", "D"), span("ob", "D"),
              span("HF", "D"), span("heart failure", "D"), span("high fat", "D"), span("overactive bladder", "D", 1)]]
    assert undefined_short_form("OABs") == "OAB" and undefined_short_form("Oab") is None and undefined_short_form("ob") is None
    # OAB, OABs → the first "overactive bladder" (the second has the same text); HF has two long forms: left alone
    assert undefined_short_form_links([doc], spans, [True] * 9) == {1: 0, 2: 0}
    assert undefined_short_form_links([doc], spans, [True, False, True] + [True] * 6) == {2: 0}  # decided: not touched
    spans[0][0] = (spans[0][0][0], spans[0][0][1], "C")
    assert undefined_short_form_links([doc], spans, [True] * 9) == {1: 8, 2: 8}  # the same label only
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3,
                                       "rules": {"short": {"@misc": "spacy_pel.rules.undefined_short_forms.v1"}}})
    doc.ents = [Span(doc, a, b, label=lab) for a, b, lab in spans[0] if (a, b) != (spans[0][0][0], spans[0][0][1])]
    linked = nlp(doc).ents
    assert linked[0]._.pel_candidates == linked[-1]._.pel_candidates != linked[4]._.pel_candidates
