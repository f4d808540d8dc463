"""``pel_discovery`` after its linker: the mentions it linked and the decisions they carry (a span finder's,
one labelled linker's of two, a span group's, rule-decided ones), and its settings checked when it is made."""
import pytest
import spacy
import torch
from spacy.tokens import Span

from spacy_pel.discovery.cluster import resolve_linking
from spacy_pel.models.span_scorer import SpanScorer, save_span_scorer

TEXT = "Aspirin and warfarin with atrial flutter and lithium carbonate ."
MENTIONS = ((0, 1, "Chemical"), (2, 3, "Chemical"), (4, 6, "Disease"), (7, 9, "Chemical"))
RULES = {"aliases": {"@misc": "spacy_pel.rules.alias_table.v1"}}


def pipeline(kb_dir, discovery=None, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "precision": "fp32", **config})
    if discovery is not None:
        nlp.add_pipe("pel_discovery", config=discovery)
    return nlp


def given(nlp, key=None, mentions=MENTIONS, text=TEXT):
    doc = nlp.make_doc(text)
    spans = [Span(doc, a, b, label=label) for a, b, label in mentions]
    if key is None:
        doc.ents = spans
    else:
        doc.spans[key] = spans
    return doc


def links(spans):
    return [(s.text, s.kb_id_) for s in spans]


def test_pipeline_linking_keeps_a_span_finders_nil_decisions(kb_dir, tmp_path):
    """The NIL classifier weighs the span model's probability, which only the linker has: discovery keeps
    its NIL decisions instead of linking again with `span` = 1 (which linked every mention here)."""
    scorer = SpanScorer(32)
    for p in scorer.parameters():
        torch.nn.init.zeros_(p)  # every span p = 0.5
    save_span_scorer(scorer, tmp_path / "span_scorer.safetensors")
    config = {"mentions": {"@misc": "spacy_pel.mentions.span_finder.v1", "scorer": str(tmp_path / "span_scorer.safetensors"),
                           "threshold": 0.4, "max_span_len": 2},
              "nil": {"@misc": "spacy_pel.nil.classifier.v1", "weights": {"span": 20.0}, "bias": -15.0}, "threshold": 0.5}
    alone = pipeline(kb_dir, **config)(TEXT)
    assert len(alone.ents) and all(e.kb_id_ == "NIL" for e in alone.ents)  # σ(20·0.5 − 15): NIL
    found = pipeline(kb_dir, {}, **config)(TEXT)  # auto → pipeline (a NIL classifier)
    assert [(e.start, e.end) for e in found.ents] == [(e.start, e.end) for e in alone.ents]
    assert all(e.kb_id_.startswith("NIL:") for e in found.ents), links(found.ents)
    assert [e._.pel_confidence for e in found.ents] == [e._.pel_confidence for e in alone.ents]


def test_discovery_of_one_labelled_linker_leaves_the_other_linkers_mentions(kb_dir):
    nlp = spacy.blank("en")
    for name, label, threshold in (("chem", "Chemical", 1.0), ("dis", "Disease", None)):
        mentions = {"@misc": "spacy_pel.mentions.ents.v1", "labels": [label]}
        nlp.add_pipe("pel_linker", name=name, config={"kb": str(kb_dir), "threshold": threshold, "precision": "fp32",
                                                      "mentions": mentions})
    alone = nlp(given(nlp))
    nlp.add_pipe("pel_discovery", config={"linker": "chem"})
    doc = nlp(given(nlp))
    disease = [(e.text, e.kb_id_, e._.pel_candidates) for e in doc.ents if e.label_ == "Disease"]
    assert disease == [(e.text, e.kb_id_, e._.pel_candidates) for e in alone.ents if e.label_ == "Disease"]
    assert disease[0][1].startswith("D")  # the Disease linker's link, not a NIL cluster of the Chemical one
    assert all(e.kb_id_.startswith("NIL:") for e in doc.ents if e.label_ == "Chemical")  # threshold 1.0: all NIL
    assert [e.label_ for e in doc.ents] == ["Chemical", "Chemical", "Disease", "Chemical"]


def test_discovery_clusters_a_span_group_linkers_mentions(kb_dir):
    group = {"@misc": "spacy_pel.mentions.span_group.v1", "spans_key": "sc"}
    overlapping = ((0, 1, "Chemical"), (0, 3, "Chemical"), (2, 3, "Chemical"))
    nlp = pipeline(kb_dir, {"threshold": 2.0}, threshold=1.0, mentions=group)  # 2.0: nothing links
    doc = nlp(given(nlp, "sc", overlapping))
    assert [s.kb_id_ for s in doc.spans["sc"]] == ["NIL:0", "NIL:1", "NIL:2"]
    assert [(s.start, s.end) for s in doc.spans["sc"]] == [(a, b) for a, b, _ in overlapping] and not doc.ents
    assert all(s._.pel_candidates for s in doc.spans["sc"])  # the linker's candidates stay on the spans


def test_auto_keeps_the_links_of_a_linker_with_candidate_rules(kb_dir):
    """Clustering inference links by the vectors alone: `auto` keeps what a linker's rules decided (the alias
    table's exact names) and clusters its NIL mentions; a rule-less or calibrated linker resolves as before."""
    alone = pipeline(kb_dir, rules=RULES)
    expected = links(alone(given(alone)).ents)
    assert [i for _, i in expected] == ["D4", "D5", "D3", "D1"]  # exact names
    nlp = pipeline(kb_dir, {}, rules=RULES)
    doc = nlp(given(nlp))
    assert links(doc.ents) == expected
    assert all(e.kb_id_ == e._.pel_candidates[0][0] for e in doc.ents)
    assert resolve_linking(nlp.get_pipe("pel_linker"), "auto") == "pipeline"
    assert resolve_linking(pipeline(kb_dir).get_pipe("pel_linker"), "auto") == "cluster"
    classifier = {"@misc": "spacy_pel.nil.classifier.v1", "weights": {"top": 5.0}, "bias": -2.0}
    assert resolve_linking(pipeline(kb_dir, nil=classifier, threshold=0.5).get_pipe("pel_linker"), "auto") == "pipeline"


@pytest.mark.parametrize("top_k", [1, 5])
def test_clustering_inference_puts_the_entity_a_mention_ends_with_first_in_its_candidates(kb_dir, top_k):
    """β = 0: the two mentions (similar under the tiny model) merge before they reach their entities, so the
    one entity takes both; each span's first candidate is its entity (among its candidates or not), and its
    confidence (the linker's: the best score) that candidate's score."""
    texts = ["flutter", "Lithium toxicity ."]
    alone = pipeline(kb_dir, threshold=None, top_k=top_k)
    before = [alone(given(alone, mentions=((0, 1, "Disease"),), text=t)).ents[0] for t in texts]
    nlp = pipeline(kb_dir, {"linking": "cluster", "mention_margin": 0.0}, threshold=None, top_k=top_k)
    after = [d.ents[0] for d in nlp.pipe([given(nlp, mentions=((0, 1, "Disease"),), text=t) for t in texts])]
    assert [e.kb_id_ for e in before] == ["D4", "D1"] and [e.kb_id_ for e in after] == ["D1", "D1"]
    for span, old in zip(after, before):
        assert span.kb_id_ == span._.pel_candidates[0][0], (span.text, span.kb_id_, span._.pel_candidates)
        assert span._.pel_confidence == span._.pel_candidates[0][2]
        assert sorted(c[0] for c in span._.pel_candidates) == sorted({span.kb_id_, *(c[0] for c in old._.pel_candidates)})
    assert after[0]._.pel_candidates[0][1] == "lithium carbonate" and len(after[0]._.pel_candidates) == min(top_k + 1, 5)


@pytest.mark.parametrize("setting, value", [("batch_size", 0), ("batch_size", -1), ("k", -3), ("mention_margin", -1.0),
                                            ("linker", "nope"), ("linking", "graph")])
def test_bad_settings_are_refused_when_the_component_is_made(kb_dir, setting, value):
    nlp = pipeline(kb_dir)
    with pytest.raises(ValueError, match=f"pel_discovery: .*{setting}"):
        nlp.add_pipe("pel_discovery", config={setting: value})
    assert "pel_discovery" not in nlp.pipe_names


def test_a_threshold_the_linking_mode_does_not_use_is_refused_when_the_component_is_made(kb_dir):
    nlp = pipeline(kb_dir, rules=RULES)  # auto → pipeline: no edge floor
    with pytest.raises(ValueError, match="pel_discovery: threshold"):
        nlp.add_pipe("pel_discovery", config={"threshold": 0.5})


def test_a_linker_gone_after_the_component_was_made_is_named_at_first_use(kb_dir):
    nlp = pipeline(kb_dir, {"batch_size": 1})
    docs = [given(nlp), given(nlp)]
    assert len(list(nlp.pipe(docs))) == 2
    nlp.remove_pipe("pel_linker")
    with pytest.raises(ValueError, match="pel_discovery: `linker` = 'pel_linker'"):
        nlp(given(nlp))


@pytest.mark.parametrize("key", [None, "sc"])
def test_discover_over_a_corpus_keeps_span_ids_and_the_groups_attrs(kb_dir, key):
    """``discover`` (the CLI's and library's route, not the pipeline step's) writes its ids through the same
    path as the linker: a span's ``id`` (e.g. a span_ruler pattern id) and the group's ``attrs`` stay."""
    from spacy_pel.discovery.cluster import discover

    nlp = pipeline(kb_dir)
    doc = nlp.make_doc(TEXT)
    spans = [Span(doc, a, b, label=label, span_id=f"pattern{n}") for n, (a, b, label) in enumerate(MENTIONS)]
    if key is None:
        doc.ents = spans
    else:
        doc.spans[key] = spans
        doc.spans[key].attrs["source"] = "ruler"
    counts = discover(nlp, [doc], k=2, spans_key=key, threshold=2.0)
    out = doc.ents if key is None else doc.spans[key]
    assert counts["nil_clusters"] == 4 and [s.kb_id_ for s in out] == ["NIL:0", "NIL:1", "NIL:2", "NIL:3"]
    assert [s.id_ for s in out] == ["pattern0", "pattern1", "pattern2", "pattern3"]
    if key is not None:
        assert doc.spans[key].attrs == {"source": "ruler"}
