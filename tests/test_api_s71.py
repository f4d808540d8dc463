"""The documented extension points and Python API as a developer uses them: a mention source that returns the
contract's tuple, in any span order; a NIL strategy on its own scale or with a bad ``label_types``; a threshold
above 1 where a rule adds to the scores; ``configure_linker`` with a Path or a wrong component name; given
mentions linked through a custom source."""
import numpy as np
import pytest
import spacy
from spacy.tokens import Span

from spacy_pel.corpora import GOLD_KEY
from spacy_pel.files import InputError
from spacy_pel.pipeline.given_mentions import GivenMentions
from spacy_pel.pipeline.linker import PELLinker, configure_linker
from spacy_pel.pipeline.mentions import DocSpans
from spacy_pel.pipeline.nil import TopScoreNil
from tests.test_linker import SPANS, TEXT


class TupleSource:
    """The MentionSource protocol exactly (contracts.py): find → (per doc [(start, end, label)], hidden or None),
    its spans longest first (the contract asks no order)."""

    label_from_kb = False

    def spans(self, doc):
        return doc.ents

    def find(self, docs, encoder, batch_size):
        return [sorted([(s.start, s.end, s.label) for s in d.ents], key=lambda t: t[0] - t[1]) for d in docs], None

    def write(self, doc, spans):
        doc.ents = spans
        return bool(spans)


def doc_with_ents(nlp):
    doc = nlp.make_doc(TEXT)
    doc.ents = [Span(doc, a, b, label=label) for a, b, label in SPANS]
    return doc


def pipeline(kb_dir, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "device": "cpu", **config})
    return nlp


def test_a_source_returning_the_contracts_tuple_in_any_order_gets_its_own_candidates(kb_dir):
    """Defects: a (spans, hidden) tuple failed at the first document ('tuple' object has no attribute 'spans');
    spans listed out of document order got other spans' candidates and confidences (paired by position)."""
    expected = {(e.start, e.end): (e.kb_id_, e._.pel_candidates, e._.pel_confidence)
                for e in pipeline(kb_dir, threshold=0.0)(doc_with_ents(spacy.blank("en"))).ents}
    nlp = pipeline(kb_dir, threshold=0.0)
    nlp.get_pipe("pel_linker").mentions = TupleSource()
    got = {(e.start, e.end): (e.kb_id_, e._.pel_candidates, e._.pel_confidence) for e in nlp(doc_with_ents(nlp)).ents}
    assert got == expected
    assert all(kb_id == cands[0][0] for kb_id, cands, _ in got.values())


def test_a_threshold_is_checked_on_the_scale_of_the_nil_confidence(kb_dir):
    """Defect: every threshold outside [-1, 1] was refused as outside the cosine range, also for a NIL strategy
    on its own scale and where the char_ngrams rule adds up to its weight to the scores."""
    rule = {"@misc": "spacy_pel.rules.char_ngrams.v1", "weight": 0.2}
    pipeline(kb_dir, threshold=1.15, rules={"chars": rule})  # within [-1.2, 1.2]
    with pytest.raises(ValueError, match=r"outside \[-1\.2, 1\.2\]"):
        pipeline(kb_dir, threshold=1.3, rules={"chars": rule})
    with pytest.raises(ValueError, match=r"outside \[-1, 1\]"):
        pipeline(kb_dir, threshold=1.05)

    class LogOdds(TopScoreNil):  # another strategy, its confidence a log-odds
        def __call__(self, features):
            return (10 * features[:, 0]).astype(np.float32)

    nlp = pipeline(kb_dir)
    nlp.get_pipe("pel_linker").nil = LogOdds()
    configure_linker(nlp, threshold=2.5)
    assert nlp.get_pipe("pel_linker").cfg.threshold == 2.5


def test_a_nil_strategy_whose_label_types_are_not_lists_is_refused_naming_it(kb_dir):
    """Defect: a custom strategy's {"Chemical": "Chemical"} was read as the letters of the string."""
    class Typed(TopScoreNil):
        label_types = {"Chemical": "Chemical"}

    with pytest.raises(ValueError, match=r"`nil` must be a NIL strategy.*`label_types` must map span labels to lists"):
        PELLinker(spacy.blank("en").vocab, nil=Typed())


def test_configure_linker_takes_a_path_and_names_a_wrong_component_in_one_line(kb_dir, tmp_path):
    """Defects: a Path kept in the linker's sources failed the next nlp.to_disk (not JSON serializable, the
    folder half written); a component name that is no pel_linker gave a bare AttributeError."""
    nlp = pipeline(kb_dir)
    nlp.add_pipe("sentencizer")
    nlp(doc_with_ents(nlp))  # loads the KB: a swap then reloads it
    configure_linker(nlp, kb=kb_dir)
    assert nlp.get_pipe("pel_linker").sources["kb"] == str(kb_dir)
    nlp.to_disk(tmp_path / "pipe")
    with pytest.raises(InputError, match="no pel_linker called 'sentencizer'"):
        configure_linker(nlp, "sentencizer", top_k=2)


def test_given_overlapping_mentions_are_all_linked_through_a_subclass_of_the_docs_spans_source(kb_dir):
    """Defect: only the exact DocSpans class was pointed at the given mentions (pel_gold); with a subclass the
    overlapping given mention was dropped while the report said none was left out."""
    class Mine(DocSpans):
        pass

    nlp = pipeline(kb_dir)
    nlp.get_pipe("pel_linker").mentions = Mine(None)
    doc = nlp.make_doc(TEXT)
    doc.spans[GOLD_KEY] = [Span(doc, 0, 1, label="Chemical"), Span(doc, 0, 2, label="Chemical")]
    doc.ents = [Span(doc, 0, 2, label="Chemical")]
    given = GivenMentions(nlp)
    assert given.links_overlaps
    (linked,) = given.pipe([doc])
    assert [(s.start, s.end) for s in given.linked_spans(linked)] == [(0, 1), (0, 2)]
    assert all(s.kb_id_ for s in given.linked_spans(linked))
