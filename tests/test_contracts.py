"""The linker's parts are checked against their typed contracts (spacy_pel/pipeline/contracts.py)
when the component is made: a part that does not fit is refused there, with a message naming it,
rather than on the first document."""
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.util import registry

from spacy_pel.pipeline.contracts import (
    CandidateRule,
    MentionSource,
    NilStrategy,
    VectorStrategy,
    contract_problems,
)
from spacy_pel.pipeline.linker import PELLinker
from spacy_pel.pipeline.mentions import DocSpans
from spacy_pel.pipeline.nil import ClassifierNil, TopScoreNil
from spacy_pel.pipeline.rules.alias_table import AliasRule
from spacy_pel.pipeline.rules.batch import CandidateBatch
from spacy_pel.pipeline.vectors import collective_vectors, mention_text_vectors, per_mention_vectors

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


class ConfidenceOnly:
    """A user's NIL strategy that forgot ``label_types``: the linker reads it for every batch."""

    def __call__(self, features: np.ndarray) -> np.ndarray:
        return features[:, 0]


@registry.misc("test_contracts.nil_without_label_types.v1")
def nil_without_label_types():
    return ConfidenceOnly()


@registry.misc("test_contracts.not_callable_rule.v1")
def not_callable_rule():
    return {"drop": "digits"}  # a rule's settings instead of the rule


@registry.misc("test_contracts.good_rule.v1")
def good_rule():
    def rule(batch: CandidateBatch) -> None:
        pass
    return rule


def make(config):
    return spacy.blank("en").add_pipe("pel_linker", config=config)


def test_nil_strategy_without_label_types_is_refused_at_construction():
    with pytest.raises(ValueError) as err:
        make({"nil": {"@misc": "test_contracts.nil_without_label_types.v1"}})
    message = str(err.value)
    assert "`nil`" in message and "NilStrategy" in message and "label_types" in message


def test_rule_that_is_not_callable_is_refused_naming_the_rule():
    with pytest.raises(ValueError) as err:
        make({"rules": {"ok": {"@misc": "test_contracts.good_rule.v1"},
                        "digits": {"@misc": "test_contracts.not_callable_rule.v1"}}})
    message = str(err.value)
    assert "`rules.digits`" in message and "not callable" in message and "`rules.ok`" not in message


def test_rule_with_a_prepare_that_is_not_callable_or_takes_no_batch_is_refused():
    class BadPrepare:
        prepare = None

        def __call__(self, batch):
            pass

    class NoBatch:
        def prepare(self):
            pass

        def __call__(self, batch):
            pass

    assert contract_problems(BadPrepare(), CandidateRule) == ["its `prepare` is missing or not callable"]
    assert contract_problems(NoBatch(), CandidateRule) == ["its `prepare` cannot be called with 1 argument"]


def test_vector_strategy_with_the_wrong_arguments_is_refused():
    with pytest.raises(ValueError, match=r"`vectors`.*cannot be called with 5 arguments"):
        PELLinker(spacy.blank("en").vocab, vectors=lambda encoder, docs: None)


def test_mention_source_without_write_is_refused():
    class Reader:
        label_from_kb = False

        def spans(self, doc):
            return doc.ents

        def find(self, docs, encoder, batch_size):
            return [[] for _ in docs], None

    with pytest.raises(ValueError, match=r"`mentions`.*MentionSource.*`write`"):
        PELLinker(spacy.blank("en").vocab, mentions=Reader())


def test_the_packaged_parts_fulfil_their_contracts():
    for value, contract in [
        (DocSpans(None), MentionSource), (DocSpans("sc"), MentionSource),
        (per_mention_vectors, VectorStrategy), (collective_vectors, VectorStrategy), (mention_text_vectors, VectorStrategy),
        (AliasRule(), CandidateRule), (TopScoreNil(), NilStrategy), (ClassifierNil({"top": 1.0}), NilStrategy),
    ]:
        assert contract_problems(value, contract) == [], value
        assert isinstance(value, contract)  # also as runtime-checkable protocols
    # and a pipeline with every shipped rule is made without complaint
    rules = spacy.util.load_config(CONFIGS / "linker_rules.cfg")["components"]["pel_linker"]["rules"]
    assert len(make({"rules": rules}).rules) == len(rules) > 5
