"""``nlp.evaluate`` / ``spacy evaluate`` / ``spacy train`` of a pipeline with one ``pel_linker`` per KB (each
with ``labels``): the unprefixed scores are the whole pipeline's, every linker's gold mentions pooled, in
any order of the components; each linker's own scores stay under its name (``chemical_linker_pel_r1``).
Before, each linker returned the same unprefixed keys over its own labels and spaCy's ``Scorer.score``
kept the last one's (both linkers: ``nel_f_per_type`` of the diseases only)."""
import pytest
import spacy
from spacy.scorer import Scorer
from spacy.training import Example

from tests.test_linker_labels import kbs  # noqa: F401  (the fixture: a KB of the chemicals, one of the diseases)
from tests.test_spacy_commands import TEXTS, examples, gold_doc

KINDS = ("Chemical", "Disease")
COUNTS = ("pel_mentions", "pel_in_kb", "pel_absent", "pel_nil")


def pipeline(kbs, kinds=KINDS, **settings):  # noqa: F811
    nlp = spacy.blank("en")
    for kind in kinds:
        nlp.add_pipe("pel_linker", name=f"{kind.lower()}_linker", config={
            "kb": str(kbs[kind]), "top_k": 2, "device": "cpu", **settings.get(kind, {}),
            "mentions": {"@misc": "spacy_pel.mentions.ents.v1", "labels": [kind]}})
    return nlp


def scores_of(nlp):
    """The linkers' scores (not the tokenizer's, nor the speed)."""
    return {k: v for k, v in nlp.evaluate(examples(nlp)).items() if not k.startswith(("token_", "speed"))}


def alone(kbs, **settings):  # noqa: F811
    return {f"{kind.lower()}_linker": scores_of(pipeline(kbs, (kind,), **settings)) for kind in KINDS}


def weighted(singles, key, weight):
    """A figure of the linkers pooled, from each one's figure and count."""
    return sum(s[key] * s[weight] for s in singles) / sum(s[weight] for s in singles)


def test_two_linkers_are_scored_together_and_each_under_its_name(kbs):  # noqa: F811
    nlp = pipeline(kbs)
    scores, singles = scores_of(nlp), alone(kbs)
    # each linker's own figures, as it scores alone, under its name
    for name, own in singles.items():
        assert {k: scores[f"{name}_{k}"] for k in own} == own
    # the unprefixed ones: both linkers' mentions
    assert set(scores["nel_f_per_type"]) == set(scores["spans_nel_per_type"]) == set(KINDS)
    per_type = {**singles["chemical_linker"]["nel_f_per_type"], **singles["disease_linker"]["nel_f_per_type"]}
    assert scores["nel_f_per_type"] == per_type
    assert all(scores[k] == sum(s[k] for s in singles.values()) for k in COUNTS)
    assert scores["pel_mentions"] == 8 and scores["pel_in_kb"] == 6
    for key in ("pel_r1", "pel_r2", "pel_r64"):
        assert scores[key] == pytest.approx(weighted(singles.values(), key, "pel_in_kb"), abs=1e-4)
    accuracy = weighted(singles.values(), "pel_accuracy_with_nil", "pel_mentions")
    assert scores["pel_accuracy_with_nil"] == pytest.approx(accuracy, abs=1e-4)
    assert scores["spans_nel_r"] == scores["pel_nel_r"] == pytest.approx(scores["pel_r1"], abs=1e-4)
    # spaCy's nel_micro_* over the reference linked by the whole pipeline, as in test_spacy_commands
    linked = [Example(nlp(gold_doc(nlp.vocab, t, s)), gold_doc(nlp.vocab, t, s)) for t, s in TEXTS]
    expected = Scorer.score_links(linked, negative_labels=["NIL"])
    for key in ("nel_micro_p", "nel_micro_r", "nel_micro_f"):
        assert scores[key] == pytest.approx(expected[key])
    # whatever the order of the components
    reverse = pipeline(kbs, KINDS[::-1])
    assert scores_of(reverse) == scores


def test_a_linker_taken_from_another_pipeline_is_pooled_too(kbs):  # noqa: F811
    # add_pipe(source=…) keeps the source pipeline's Vocab object in the component: the pass is the docs'
    combo, other = pipeline(kbs, KINDS[:1]), pipeline(kbs, KINDS[1:])
    combo.add_pipe("disease_linker", source=other)
    assert combo.get_pipe("disease_linker").vocab is not combo.vocab
    assert scores_of(combo) == scores_of(pipeline(kbs))


def test_each_linker_decides_nil_with_its_own_threshold_in_the_pooled_figures(kbs):  # noqa: F811
    settings = {"Chemical": {"threshold": 0.999}}  # the chemicals: NIL (no cosine reaches it); the diseases: none
    scores, singles = scores_of(pipeline(kbs, **settings)), alone(kbs, **settings)
    assert singles["chemical_linker"]["pel_accuracy_with_nil"] == 0.0
    assert singles["disease_linker"]["pel_accuracy_with_nil"] > 0.0
    accuracy = weighted(singles.values(), "pel_accuracy_with_nil", "pel_mentions")
    assert scores["pel_accuracy_with_nil"] == pytest.approx(accuracy, abs=1e-4)
    assert scores["pel_nil_r"] == singles["disease_linker"]["pel_nil_r"]  # the one gold NIL is a disease
    assert scores["pel_nil_p"] == 0.0  # called NIL: the 3 chemicals, none NIL in the gold
    assert scores["chemical_linker_pel_nel_r"] == 0.0 and scores["pel_nel_r"] > 0.0


def test_one_linker_pipeline_keeps_its_keys(kbs):  # noqa: F811
    scores = scores_of(pipeline(kbs, ("Chemical",)))
    assert not any(k.startswith("chemical_linker") for k in scores)
    assert set(scores["nel_f_per_type"]) == {"Chemical"} and scores["pel_mentions"] == 3


def test_a_linker_scoring_the_same_examples_again_starts_a_new_pass(kbs):  # noqa: F811
    """spaCy's Scorer given the same examples twice: the second time, without the disease linker, the
    chemical linker's figures are its own, not pooled with the diseases of the first time."""
    nlp = pipeline(kbs)
    egs = examples(nlp)
    assert set(Scorer(nlp).score(egs)["nel_f_per_type"]) == set(KINDS)
    with nlp.select_pipes(disable=["disease_linker"]):
        again = Scorer(nlp).score(egs)
    assert set(again["nel_f_per_type"]) == {"Chemical"} and not any(k.startswith("disease_linker") for k in again)


PATTERNS = [{"label": "Chemical", "pattern": p} for p in ("Lithium carbonate", "Aspirin", "warfarin")] + [
    {"label": "Disease", "pattern": p} for p in ("tricuspid regurgitation", "atrial flutter", "flutter", "novel syndrome")]


def ruled(kbs, kinds, spans_key=None):  # noqa: F811
    """A ruler's mentions (doc.ents, or a span group) linked without gold ents, one linker per kind."""
    nlp = spacy.blank("en")
    if spans_key is None:
        nlp.add_pipe("entity_ruler").add_patterns(PATTERNS)
        source = {"@misc": "spacy_pel.mentions.ents.v1"}
    else:
        nlp.add_pipe("span_ruler", config={"spans_key": spans_key}).add_patterns(PATTERNS)
        source = {"@misc": "spacy_pel.mentions.span_group.v1", "spans_key": spans_key}
    for kind in kinds:
        nlp.add_pipe("pel_linker", name=f"{kind.lower()}_linker", config={
            "kb": str(kbs[kind]), "top_k": 2, "device": "cpu", "use_gold_ents": False,
            "mentions": {**source, "labels": [kind]}})
    return nlp


def test_without_gold_ents_a_linker_is_scored_on_its_own_spans_and_linkers_are_pooled(kbs):  # noqa: F811
    chemicals = scores_of(ruled(kbs, ["Chemical"]))
    assert chemicals["pel_mentions"] == 3  # its labels' mentions only (the diseases' counted as misses before)
    linking = lambda scores: {k: v for k, v in scores.items() if not k.startswith(("ents_", "spans_ruler"))}  # noqa: E731
    # a span group's linker: scored (on nothing before), as the same linker of doc.ents
    assert linking(scores_of(ruled(kbs, ["Chemical"], spans_key="sc"))) == linking(chemicals)
    both, diseases = scores_of(ruled(kbs, KINDS)), scores_of(ruled(kbs, ["Disease"]))
    assert both["pel_mentions"] == chemicals["pel_mentions"] + diseases["pel_mentions"]
    assert {k: both[f"chemical_linker_{k}"] for k in linking(chemicals)} == linking(chemicals)
