"""``span._.pel_candidates`` / ``pel_confidence`` are kept per span label (:mod:`spacy_pel.pipeline.span_data`):
spaCy keys a span extension by offsets only, so two spans of a group at the same offsets (a multi-label
spancat's ``Aspirin`` as Chemical and as Disease, one linker per KB) shared the last linker's values."""
import spacy
from spacy.tokens import Doc, DocBin, Span

from spacy_pel.pipeline import linker  # noqa: F401  (registers the extensions, as the component does)
from tests.test_linker_labels import kbs  # noqa: F401  (the fixture: a KB of the chemicals, one of the diseases)


def test_two_linkers_keep_their_own_candidates_on_spans_at_the_same_offsets(kbs):  # noqa: F811
    nlp = spacy.blank("en")
    for kind in ("Chemical", "Disease"):
        nlp.add_pipe("pel_linker", name=kind.lower(), config={
            "kb": str(kbs[kind]), "top_k": 2, "device": "cpu",
            "mentions": {"@misc": "spacy_pel.mentions.span_group.v1", "spans_key": "sc", "labels": [kind]}})
    for _, component in nlp.pipeline:
        component.ensure_loaded()
    ids = {kind: set(nlp.get_pipe(kind.lower()).index.entities.ids) for kind in ("Chemical", "Disease")}
    assert not ids["Chemical"] & ids["Disease"]
    doc = nlp.make_doc("Aspirin toxicity was seen.")
    doc.spans["sc"] = [Span(doc, 0, 1, "Chemical"), Span(doc, 0, 1, "Disease")]
    doc = nlp(doc)
    for span in doc.spans["sc"]:
        own = ids[span.label_]
        assert span.kb_id_ in own and span._.pel_candidates and {c[0] for c in span._.pel_candidates} <= own
        assert isinstance(span._.pel_confidence, float)
    # carried by spaCy's own copies, as any span extension
    back = list(DocBin(docs=[doc], store_user_data=True).get_docs(nlp.vocab))[0]
    joined = Doc.from_docs([nlp.make_doc("First."), doc])
    want = {s.label_: s._.pel_candidates for s in doc.spans["sc"]}
    for other in (back, joined, doc.copy()):
        got = {s.label_: s._.pel_candidates for s in other.spans["sc"]}
        assert {label: [list(c) for c in cands] for label, cands in got.items()} == want
    shifted = joined.char_span(len("First. "), len("First. Aspirin"), "Disease")
    assert shifted._.pel_candidates == doc.spans["sc"][1]._.pel_candidates


def test_a_value_set_the_plain_way_is_read_for_every_label():
    doc = spacy.blank("en")("Aspirin toxicity")
    doc.user_data[("._.", "pel_confidence", 0, 7)] = 0.5  # a doc linked before values were kept per label
    assert Span(doc, 0, 1, "Chemical")._.pel_confidence == 0.5 == Span(doc, 0, 1, "Disease")._.pel_confidence
    Span(doc, 0, 1, "Chemical")._.pel_confidence = 0.9
    assert Span(doc, 0, 1, "Chemical")._.pel_confidence == 0.9 and Span(doc, 0, 1, "Disease")._.pel_confidence is None
    assert Span(doc, 1, 2, "Disease")._.pel_candidates is None


def test_linking_keeps_the_spans_ids_and_the_groups_attrs(kbs):  # noqa: F811
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kbs["Chemical"]), "top_k": 2, "device": "cpu", "mentions": {
        "@misc": "spacy_pel.mentions.span_group.v1", "spans_key": "sc", "labels": ["Chemical"]}})
    doc = nlp.make_doc("Aspirin gave atrial flutter.")
    doc.spans["sc"] = [Span(doc, 0, 1, "Chemical", span_id="m1"), Span(doc, 2, 4, "Disease", span_id="m2")]
    doc.spans["sc"].attrs["source"] = "my-ner"
    doc = nlp(doc)
    assert [(s.text, s.id_, bool(s.kb_id_)) for s in doc.spans["sc"]] == [("Aspirin", "m1", True), ("atrial flutter", "m2", False)]
    assert doc.spans["sc"].attrs == {"source": "my-ner"}
    ents = spacy.blank("en")
    ents.add_pipe("pel_linker", config={"kb": str(kbs["Chemical"]), "top_k": 2, "device": "cpu"})
    doc = ents.make_doc("Aspirin gave atrial flutter.")
    doc.ents = [Span(doc, 0, 1, "Chemical", span_id="m1")]
    assert [(e.id_, bool(e.kb_id_)) for e in ents(doc).ents] == [("m1", True)]
