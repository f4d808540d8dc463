"""``spacy_pel.rules.parenthetical_synonyms.v1``: mentions written ``A (B)`` name one entity."""
import spacy

from spacy_pel.pipeline.rules.parenthetical_synonyms import parenthetical_pairs

ALIASES = {"@misc": "spacy_pel.rules.alias_table.v1"}
PARENS = {"@misc": "spacy_pel.rules.parenthetical_synonyms.v1"}
ABBREVIATIONS = {"@misc": "spacy_pel.rules.abbreviations.v1"}


def _doc(nlp, text, *mentions):
    doc = nlp.make_doc(text)
    spans = []
    for words, label in mentions:
        start = text.index(words)
        spans.append(doc.char_span(start, start + len(words), label=label))
    doc.ents = spans
    return doc, [[(s.start, s.end, s.label_) for s in spans]]


def test_pairs_are_adjacent_mentions_of_one_label_in_parentheses():
    nlp = spacy.blank("en")
    doc, spans = _doc(nlp, "XQ-77 (aspirin) and warfarin ( Li2CO3 ) , then flutter (nausea-like) and atrial (fibrillation",
                      ("XQ-77", "C"), ("aspirin", "C"), ("warfarin", "C"), ("Li2CO3", "D"), ("flutter", "D"),
                      ("nausea-like", "D"), ("atrial", "D"), ("fibrillation", "D"))
    # warfarin (Li2CO3): labels differ; atrial (fibrillation: never closed
    assert parenthetical_pairs([doc], spans) == [(0, 1), (4, 5)]
    doc2, spans2 = _doc(nlp, "aspirin and (warfarin) ; XQ-77 (Li2CO3)", ("aspirin", "C"), ("warfarin", "C"),
                        ("XQ-77", "C"), ("Li2CO3", "C"))
    # words between aspirin and (warfarin): no pair; the second doc's indices follow the first's 8 mentions
    assert parenthetical_pairs([doc, doc2], spans + spans2) == [(0, 1), (4, 5), (10, 11)]


def _link(kb_dir, rules, doc):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "rules": rules})
    return [(e.kb_id_, e._.pel_candidates) for e in nlp(doc).ents]


def test_an_open_mention_takes_the_decided_ones_candidates(kb_dir):
    nlp = spacy.blank("en")
    doc, _ = _doc(nlp, "XQ-77 (aspirin) and ZZ-1 (YY-2) .", ("XQ-77", "C"), ("aspirin", "C"), ("ZZ-1", "C"), ("YY-2", "C"))
    without = _link(kb_dir, {"aliases": ALIASES}, doc)
    linked = _link(kb_dir, {"aliases": ALIASES, "parens": PARENS}, doc)
    assert linked[1] == without[1] == ("D4", [["D4", "aspirin", 1.0]])  # decided by its KB name
    assert linked[0] == linked[1] and without[0] != without[1]  # XQ-77 now takes aspirin's entity
    assert linked[2:] == without[2:]  # neither decided: left alone


def test_a_short_form_in_parentheses_with_a_kb_name_brings_its_long_form_along(kb_dir):
    """``QO (aspirin)`` where QO is defined as the short form of a long form no rule decides: the long
    form and every QO tied to it take aspirin's entity, not the long form's own retrieval."""
    nlp = spacy.blank("en")
    text = "Patients took quartz oxide (QO) daily . QO (aspirin) toxicity : QO again ."
    doc = nlp.make_doc(text)
    starts = [text.index("quartz"), text.index("QO"), text.index("QO (aspirin)"), text.index("aspirin"), text.index("QO again")]
    words = ["quartz oxide", "QO", "QO", "aspirin", "QO"]
    doc.ents = [doc.char_span(a, a + len(w), label="C") for a, w in zip(starts, words)]
    rules = {"abbreviations": ABBREVIATIONS, "aliases": ALIASES}
    without = _link(kb_dir, rules, doc)
    linked = _link(kb_dir, {**rules, "parens": PARENS}, doc)
    assert linked[3] == without[3] == ("D4", [["D4", "aspirin", 1.0]])  # decided by its KB name
    assert len({w[0] for w in without[:3] + without[4:]}) == 1  # the short forms follow the long form
    assert [x[0] for x in linked] == ["D4"] * 5  # the long form, its short forms and aspirin: one entity
    assert linked[0][1] == linked[1][1] == linked[4][1] == [["D4", "aspirin", 1.0]]  # its candidates, not their own
