"""NIL decision strategies of pel_linker (spacy_pel.pipeline.nil) and their calibration."""
import inspect

import numpy as np
import pytest
import spacy
from confection import Config
from sklearn.linear_model import LogisticRegression
from spacy.tokens import Span

from spacy_pel.cli import discover as discover_cli
from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.discovery.cluster import MENTION_MARGIN, discover
from spacy_pel.evaluation.linking import evaluate
from spacy_pel.evaluation.nil import calibrate, fit_classifier, nil_curve
from spacy_pel.pipeline.nil import FEATURES, PAIRS, UNKNOWN_TYPE, classifier_nil, lexical_features, top_score_nil

TEXT = "Lithium carbonate toxicity caused tricuspid regurgitation and atrial flutter in a newborn"
RULES = {"aliases": {"@misc": "spacy_pel.rules.alias_table.v1"}}
CLASSIFIER = {"@misc": "spacy_pel.nil.classifier.v1", "weights": {"rule": 20.0}, "bias": -10.0,
              "label_types": {"Chemical": ["Chemical"], "Disease": ["Disease"]}}


def linker_pipeline(kb_dir, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "rules": RULES, **config})
    return nlp


def doc_with(nlp, spans, text=TEXT):
    doc = nlp.make_doc(text)
    doc.spans[GOLD_KEY] = [Span(doc, a, b, label=label, kb_id=kb_id) for a, b, label, kb_id in spans]
    doc.ents = list(doc.spans[GOLD_KEY])
    return doc


def test_features_show_rule_margin_and_type(kb_dir):
    nlp = linker_pipeline(kb_dir, nil=CLASSIFIER)
    linker = nlp.get_pipe("pel_linker")
    doc = doc_with(nlp, [(0, 2, "Chemical", "D1"), (2, 3, "Other", "NIL"), (9, 12, "Disease", "NIL")])
    linked = linker.candidates([doc], [[(s.start, s.end, s.label) for s in doc.ents]])[0]
    f = {name: linked.features[:, i] for i, name in enumerate(FEATURES)}
    # "Lithium carbonate" is a KB name of one entity: decided by the alias table, its one candidate scored 1
    assert linked.rows[0, 0] == linker.index.row["D1"] and (linked.rows[0, 1:] == -1).all()
    assert (f["top"][0], f["margin"][0], f["rule"][0], f["type"][0]) == (1.0, 1.0, 1.0, 1.0)
    # "in a newborn" is no name: retrieved, not chosen by a rule; margin = top − runner-up
    assert f["rule"][2] == 0.0
    assert f["margin"][2] == pytest.approx(linked.scores[2, 0] - linked.scores[2, 1])
    top_types = linker.index.entities.types[linked.rows[2, 0]]
    assert f["type"][2] == float("Disease" in top_types)
    # a label the map does not name: its best entity has a type the map names for some label (every
    # entity of this KB does), so it fits as the annotated mentions it resembles do
    assert f["type"][1] == 1.0
    assert (f["span"] == 1.0).all()  # mentions the pipeline was given: no span model doubts them
    # a span finder's probabilities reach the evidence, span by span
    probs = linker.candidates([doc], [[(s.start, s.end, s.label) for s in doc.ents]], span_probs=[[0.25, 0.5, 0.75]])[0]
    assert probs.features[:, FEATURES.index("span")].tolist() == [0.25, 0.5, 0.75]


def test_a_mention_without_candidates_has_no_confidence(kb_dir):
    """A wordless mention (`--`) gets no candidate and is NIL; a classifier whose bias alone is confident
    (0.99 on all-zero evidence) must not give it that confidence: it is 0, below any threshold."""
    nlp = linker_pipeline(kb_dir, nil={**CLASSIFIER, "weights": {}, "bias": 5.0})
    doc = nlp.make_doc("Lithium carbonate -- toxicity")
    doc.ents = [Span(doc, 0, 2, "Chemical"), Span(doc, 2, 3, "Chemical")]
    linked = nlp(doc).ents
    assert linked[1].kb_id_ == "NIL" and linked[1]._.pel_candidates == [] and linked[1]._.pel_confidence == 0.0
    assert linked[0]._.pel_confidence > 0.99


def test_scores_do_not_depend_on_the_name_of_nil_label(kb_dir):
    """A gold NIL mention (the corpus's `NIL`) that the linker calls NIL under its own `nil_label` (OUT)
    is no link either way: nlp.evaluate's figures are those of nil_label NIL."""
    from spacy.training import Example

    scores = []
    for label in ("NIL", "OUT"):
        nlp = linker_pipeline(kb_dir, nil_label=label, threshold=0.99)
        reference = doc_with(nlp, [(0, 2, "Chemical", "D1"), (9, 12, "Disease", "NIL")])
        assert [e.kb_id_ for e in nlp(doc_with(nlp, [(0, 2, "Chemical", "D1"), (9, 12, "Disease", "NIL")])).ents] == ["D1", label]
        found = nlp.evaluate([Example(nlp.make_doc(TEXT), reference)])
        scores.append({k: v for k, v in found.items() if k.startswith(("nel_", "pel_")) and not k.endswith("per_type")})
    assert scores[0] == scores[1] and scores[0]["nel_micro_f"] == 1.0


def test_the_type_evidence_knows_a_label_named_otherwise(kb_dir):
    """scispaCy's NER says DISEASE, BioRED says DiseaseOrPhenotypicFeature: both are the map's Disease."""
    nlp = linker_pipeline(kb_dir, nil=CLASSIFIER)
    linker = nlp.get_pipe("pel_linker")
    type_column = FEATURES.index("type")
    features = {}
    for label in ("Disease", "DISEASE", "DiseaseOrPhenotypicFeature", "Species"):
        doc = doc_with(nlp, [(9, 12, label, "NIL")])
        features[label] = linker.candidates([doc], [[(s.start, s.end, s.label) for s in doc.ents]])[0].features[0]
    assert features["Disease"][type_column] != UNKNOWN_TYPE and features["Species"][type_column] == 1.0
    assert (features["DISEASE"] == features["Disease"]).all() and (features["DiseaseOrPhenotypicFeature"] == features["Disease"]).all()


@pytest.mark.parametrize("label_types,disease_span", [({"Chemical": ["Chemical"]}, UNKNOWN_TYPE),
                                                      ({"Chemical": ["Chemical"], "Disease": ["Disease"]}, 1.0)])
def test_a_label_the_map_does_not_name_fits_the_types_the_map_names(kb_dir, label_types, disease_span):
    """scispaCy's general NER labels every span ENTITY: such a span is not held to be a misfit (0) nor
    half of one (the unknown 0.5) when its best entity has a type the corpus annotated; other types stay unknown."""
    nlp = linker_pipeline(kb_dir, nil={**CLASSIFIER, "label_types": label_types})
    linker = nlp.get_pipe("pel_linker")
    doc = doc_with(nlp, [(0, 2, "ENTITY", "D1"), (4, 6, "ENTITY", "D2")])
    linked = linker.candidates([doc], [[(s.start, s.end, s.label) for s in doc.ents]])[0]
    assert [linker.index.entities.types[r] for r in linked.rows[:, 0]] == [["Chemical"], ["Disease"]]
    assert linked.features[:, FEATURES.index("type")].tolist() == [1.0, disease_span]


def test_lexical_features_compare_the_text_with_the_closest_name():
    # the best name counts, case and punctuation aside; a name sharing nothing scores 0
    chars, words = lexical_features("Tricuspid-regurgitation", ["Heart Valve Diseases", "tricuspid regurgitation"])
    assert chars == pytest.approx(1.0) and words == 1.0
    chars, words = lexical_features("atrial flutter", ["Atrial Fibrillation"])
    assert 0.0 < chars < 1.0 and words == 0.5
    assert lexical_features("flutter", ["Lithium"]) == (0.0, 0.0)


def test_lexical_features_only_for_a_strategy_that_weighs_them(kb_dir):
    spans = [[(0, 2, "Chemical"), (9, 12, "Disease")]]
    doc_nlp = linker_pipeline(kb_dir)
    doc = doc_with(doc_nlp, [(0, 2, "Chemical", "D1"), (9, 12, "Disease", "NIL")])
    lexical = {**CLASSIFIER, "weights": {"rule": 20.0, "chars": 1.0}}
    with_words = linker_pipeline(kb_dir, nil=lexical).get_pipe("pel_linker").candidates([doc], spans)[0]
    f = {name: with_words.features[:, i] for i, name in enumerate(FEATURES)}
    assert f["chars"][0] == 1.0 and f["words"][0] == 1.0  # "Lithium carbonate" is the entity's name
    assert f["words"][1] < 1.0
    # the top-score rule and a classifier without lexical weights skip them (a KB record read per mention)
    assert not top_score_nil().lexical and not classifier_nil({"rule": 1.0}).lexical and classifier_nil({}).lexical
    plain = linker_pipeline(kb_dir, nil=CLASSIFIER).get_pipe("pel_linker").candidates([doc], spans)[0]
    assert (plain.features[:, 4:6] == 0).all() and (plain.features[:, :4] == with_words.features[:, :4]).all()


def test_classifier_in_config_decides_and_round_trips(kb_dir, tmp_path):
    nlp = linker_pipeline(kb_dir, nil=CLASSIFIER, threshold=0.5)
    spans = [(0, 2, "Chemical", "D1"), (9, 12, "Disease", "NIL")]
    doc = nlp(doc_with(nlp, spans))
    # the rule-matched mention is linked, the open one is NIL whatever its score: σ(−10) < 0.5
    assert [e.kb_id_ for e in doc.ents] == ["D1", "NIL"]
    assert doc.ents[1]._.pel_candidates and doc.ents[1]._.pel_confidence == pytest.approx(1 / (1 + np.exp(10)), abs=1e-5)
    nlp.to_disk(tmp_path / "pipe")
    assert Config().from_disk(tmp_path / "pipe" / "config.cfg")["components"]["pel_linker"]["nil"]["weights"] == {"rule": 20.0}
    again = spacy.load(tmp_path / "pipe")
    assert [e.kb_id_ for e in again(doc_with(again, spans)).ents] == ["D1", "NIL"]
    # the config is the source of truth: a bias given at load time takes effect
    loose = spacy.load(tmp_path / "pipe", config={"components.pel_linker.nil.bias": 10.0})
    assert [e.kb_id_ for e in loose(doc_with(loose, spans)).ents][1] != "NIL"


def test_classifier_refuses_unknown_features():
    for term in ("topp", "top*topp", "top*margin*rule", "top*"):
        with pytest.raises(ValueError, match="unknown features"):
            classifier_nil({term: 1.0})


def test_classifier_pair_terms_multiply_two_features():
    x = np.zeros((3, len(FEATURES)), np.float32)
    x[:, 0], x[:, 1] = [0.9, 0.9, 0.2], [0.8, 0.1, 0.8]  # top, margin
    nil = classifier_nil({"top": 1.0, "top*margin": 4.0, "margin*margin": -2.0}, bias=-1.0)
    z = -1.0 + x[:, 0] + 4.0 * x[:, 0] * x[:, 1] - 2.0 * x[:, 1] ** 2
    assert nil(x) == pytest.approx(1 / (1 + np.exp(-z)), abs=1e-6)
    # a term with a lexical feature makes the linker compute them; one without does not
    assert classifier_nil({"top*chars": 1.0}).lexical and not classifier_nil({"top*rule": 1.0, "words": 0.0}).lexical


def test_pairs_fit_an_interaction_the_plain_classifier_cannot():
    rng = np.random.default_rng(0)
    x = np.zeros((2000, len(FEATURES)))
    x[:, 0], x[:, 1] = rng.random(2000), rng.random(2000)
    is_nil = x[:, 0] * x[:, 1] < 0.2  # in KB only when both the score and its lead are high enough
    plain, pairs = fit_classifier(x, is_nil, {}), fit_classifier(x, is_nil, {}, pairs=True)
    assert set(plain.weights) == set(FEATURES) and "top*margin" in pairs.weights and set(pairs.weights) <= set(FEATURES + PAIRS)
    accuracy = {name: float(np.mean((m(x) < 0.5) == is_nil)) for name, m in (("plain", plain), ("pairs", pairs))}
    assert accuracy["pairs"] > 0.97 and accuracy["pairs"] > accuracy["plain"] + 0.03
    # weights fitted on standardised terms, written back for the raw ones: the same model as sklearn's
    terms = np.hstack([x, np.stack([x[:, FEATURES.index(a)] * x[:, FEATURES.index(b)] for a, b in (t.split("*") for t in PAIRS)], 1)])
    scale = np.where(terms.std(0) > 1e-9, terms.std(0), 1.0)
    reference = LogisticRegression(C=1.0, max_iter=5000).fit((terms - terms.mean(0)) / scale, ~is_nil)
    assert pairs(x) == pytest.approx(reference.predict_proba((terms - terms.mean(0)) / scale)[:, 1], abs=1e-4)


def test_nil_curve_bounds_the_recall_loss():
    conf = np.array([0.1, 0.2, 0.3, 0.4, 0.9, 0.95])
    nil = np.array([1, 1, 0, 1, 0, 0], dtype=bool)
    correct = np.array([0, 0, 1, 0, 1, 1], dtype=bool)
    free = nil_curve(conf, nil, correct)
    assert 0.4 < free["threshold"] < 0.9 and free["in_kb_r1_loss"] == pytest.approx(1 / 3)
    bounded = nil_curve(conf, nil, correct, max_r1_loss=0.0)
    assert 0.2 < bounded["threshold"] < 0.3 and bounded["in_kb_r1_loss"] == 0.0
    with pytest.raises(ValueError, match="no threshold"):
        nil_curve(np.array([0.5, 0.1]), np.array([0, 1], bool), np.array([1, 0], bool), max_r1_loss=-1.0)


def corpus_docs(nlp, n):
    """Docs whose in-KB mentions are KB names and whose NIL mentions are not."""
    return [doc_with(nlp, [(0, 2, "Chemical", "D1"), (2, 3, "Disease", "NIL"), (7, 9, "Disease", "D3"),
                           (10, 12, "Disease", "NIL")]) for _ in range(n)]


def test_calibrated_classifier_fitted_on_one_split_applies_to_another(kb_dir, tmp_path):
    nlp = linker_pipeline(kb_dir)
    nlp.to_disk(tmp_path / "pipe")
    write_docbin(corpus_docs(nlp, 4), tmp_path / "fit.spacy")
    summary = calibrate(tmp_path / "pipe", tmp_path / "fit.spacy", tmp_path / "out", nil="classifier")
    weights = summary["classifier"]["weights"]
    assert weights["rule"] > 0  # name matches go with in-KB mentions here
    assert summary["classifier"]["label_types"] == {"Chemical": ["Chemical"], "Disease": ["Disease"]}
    fitted = spacy.load(tmp_path / "out")
    linker = fitted.get_pipe("pel_linker")
    assert linker.nil.weights == weights and linker.threshold == pytest.approx(summary["threshold"])
    report = evaluate(linker, corpus_docs(fitted, 3))  # other documents
    assert report["nil"]["f"] == 1.0 and report["recall_in_kb"]["R@1"] == 1.0
    with pytest.raises(ValueError, match="unknown NIL strategy"):
        calibrate(tmp_path / "pipe", tmp_path / "fit.spacy", tmp_path / "out2", nil="margin")
    # with pairwise terms: written into the config as "a*b" weights, which the loaded pipeline uses
    summary = calibrate(tmp_path / "pipe", tmp_path / "fit.spacy", tmp_path / "pairs", nil="classifier_pairs")
    assert any("*" in term for term in summary["classifier"]["weights"])
    again = spacy.load(tmp_path / "pairs")
    paired = again.get_pipe("pel_linker")
    assert paired.nil.weights == summary["classifier"]["weights"] and paired.nil.pairs
    assert evaluate(paired, corpus_docs(again, 3))["nil"]["f"] == 1.0


def test_pipeline_discovery_links_as_the_linker_and_clusters_only_its_nil_mentions(kb_dir):
    nlp = linker_pipeline(kb_dir, nil=CLASSIFIER, threshold=0.5)
    spans = [(0, 2, "Chemical", "D1"), (2, 3, "Disease", "NIL"), (10, 12, "Disease", "NIL")]
    docs = [doc_with(nlp, spans), doc_with(nlp, spans)]  # the same mentions in the same context twice
    linker = nlp.get_pipe("pel_linker")
    vecs = linker.mention_vectors(docs[:1], [[(2, 3, 0), (10, 12, 0)]])
    apart = float(vecs[0] @ vecs[1])
    counts = discover(nlp, docs, k=3, linking="pipeline", mention_threshold=(apart + 1) / 2)
    ids = [[e.kb_id_ for e in doc.ents] for doc in docs]
    # the rule-matched mention keeps the linker's entity; each NIL mention finds its twin only
    assert ids == [["D1", "NIL:0", "NIL:1"], ["D1", "NIL:0", "NIL:1"]]
    assert counts == {"mentions": 6, "linked": 2, "nil_clusters": 2, "nil_mentions": 4}
    # a floor below their similarity puts all four NIL mentions in one cluster
    discover(nlp, docs, k=3, linking="pipeline", mention_threshold=apart - 0.01)
    assert [[e.kb_id_ for e in doc.ents] for doc in docs] == [["D1", "NIL:0", "NIL:0"]] * 2
    # a NIL classifier's threshold is a probability, not an edge floor: by default ("auto") discovery keeps the
    # linker's decisions; clustering inference asks for a floor of its own instead of calling every mention NIL
    auto = discover(nlp, docs, k=3, mention_threshold=(apart + 1) / 2)
    assert auto == counts and [[e.kb_id_ for e in doc.ents] for doc in docs] == [["D1", "NIL:0", "NIL:1"]] * 2
    with pytest.raises(ValueError, match="probability"):
        discover(nlp, docs, k=3, linking="cluster")
    nlp.add_pipe("pel_discovery")  # the component's default is auto too
    assert [e.kb_id_ for e in nlp(docs[0]).ents][0] == "D1"


def test_a_constant_feature_and_its_products_are_left_out_of_the_fit():
    """Mentions a pipeline is given all have ``span`` = 1: the classifier fitted with it is the one fitted
    without it (its products ``top*span`` … would otherwise double ``top`` … and halve their penalty)."""
    rng = np.random.default_rng(1)
    x = rng.random((600, len(FEATURES)))
    x[:, FEATURES.index("span")] = 1.0
    is_nil = x[:, 0] * x[:, 1] + 0.2 * rng.standard_normal(600) < 0.25
    fitted = fit_classifier(x, is_nil, {}, pairs=True)
    assert not any("span" in t.split("*") for t in fitted.weights)
    six = [f for f in FEATURES if f != "span"]
    terms = six + [f"{a}*{b}" for i, a in enumerate(six) for b in six[i:]]
    cols = np.stack([np.prod([x[:, FEATURES.index(f)] for f in t.split("*")], axis=0) for t in terms], 1)
    z = (cols - cols.mean(0)) / cols.std(0)
    reference = LogisticRegression(C=1.0, max_iter=5000).fit(z, ~is_nil)
    assert fitted(x) == pytest.approx(reference.predict_proba(z)[:, 1], abs=1e-4)
    assert fit_classifier(x, is_nil, {})(x).shape == (600,) and fit_classifier(x, is_nil, {}).weights["span"] == 0.0


def test_discovery_defaults_agree_between_the_library_the_component_and_the_cli():
    """One β for discover(), pel_discovery and `discover`: a user who moves between them gets the same clusters."""
    assert inspect.signature(discover).parameters["mention_margin"].default == MENTION_MARGIN == 0.3
    assert spacy.Language.get_factory_meta("pel_discovery").default_config["mention_margin"] == MENTION_MARGIN
    assert inspect.signature(discover_cli.main).parameters["mention_margin"].default.default == MENTION_MARGIN


def test_lexical_features_take_the_closest_name_wherever_it_is_listed():
    """The `chars` evidence is the best cosine over the names, not the last name's: an entity whose closest
    name comes first (its preferred name, then synonyms) scores as one whose closest name comes last."""
    names = ["aspirin", "acetylsalicylic acid"]
    chars, words = lexical_features("aspirins", names)
    assert chars > 0.7 and chars == pytest.approx(lexical_features("aspirins", names[::-1])[0])
    assert lexical_features("aspirin", names) == (pytest.approx(1.0), 1.0)


@pytest.mark.parametrize("types,fits", [(["Disease"], 0.0), (["Chemical"], 1.0), (["Disease", "Chemical"], 1.0)])
def test_the_type_evidence_of_a_mapped_label_reads_the_best_entitys_types(types, fits):
    """A label the map names (Chemical → Chemical) fits its best entity only when that entity has one of
    the label's types: a Disease entity as the best candidate of a Chemical mention is a misfit (0)."""
    from types import SimpleNamespace

    from spacy_pel.pipeline.nil import nil_features

    index = SimpleNamespace(entities=SimpleNamespace(types=[["Other"], types]))
    scores, rows = np.array([[0.9, 0.5]], np.float32), np.array([[1, 0]])
    features = nil_features(scores, rows, [False], ["Chemical"], index, label_types={"Chemical": ["Chemical"]})
    assert features[0, FEATURES.index("type")] == fits
