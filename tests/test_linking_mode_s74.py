"""The one rule for how clustering inference links (``pipeline.linking_mode``), shared by ``pel_discovery``,
``discover`` and ``calibrate --nil classifier``'s refusal."""
import pytest

from spacy_pel.pipeline.linking_mode import check_mode_settings, linking_mode


@pytest.mark.parametrize("score, rules, expected", [(True, False, "cluster"), (True, True, "pipeline"),
                                                    (False, False, "pipeline"), (False, True, "pipeline")])
def test_auto_clusters_only_a_top_score_linker_without_rules(score, rules, expected):
    assert linking_mode("auto", None, score_confidence=score, rules=rules, nil_threshold=0.5, linker="l") == expected


def test_cluster_needs_a_floor_of_its_own_when_the_nil_threshold_is_a_probability():
    with pytest.raises(ValueError, match="l's NIL threshold 0.7 is its NIL classifier's probability"):
        linking_mode("cluster", None, score_confidence=False, rules=False, nil_threshold=0.7, linker="l")
    assert linking_mode("cluster", 0.8, score_confidence=False, rules=False, nil_threshold=0.7, linker="l") == "cluster"
    assert linking_mode("cluster", None, score_confidence=False, rules=False, nil_threshold=None, linker="l") == "cluster"
    assert linking_mode("cluster", None, score_confidence=True, rules=False, nil_threshold=0.7, linker="l") == "cluster"


def test_pipeline_takes_no_floor_and_unknown_modes_are_refused():
    assert check_mode_settings("pipeline", None) == "pipeline" and check_mode_settings("cluster", 0.3) == "cluster"
    with pytest.raises(ValueError, match="linking 'pipeline' keeps the linker's own NIL decisions"):
        check_mode_settings("pipeline", 0.3)
    with pytest.raises(ValueError, match="linking must be one of auto, cluster, pipeline, not 'graph'"):
        linking_mode("graph", None, score_confidence=True, rules=False, nil_threshold=None, linker="l")
