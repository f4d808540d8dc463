"""pel_discovery's ``mention_threshold``: the floor of mention–mention edges that ``discover()`` and
``discover --mention-threshold`` take, which the component could not be given (its NIL mentions joined their
``k`` nearest however far)."""
import pytest
import spacy
from spacy.tokens import Span

from spacy_pel.discovery.cluster import discover
from tests.test_visualize_discovery_s73 import kb  # noqa: F401  (module fixture: a tiny KB)

TEXTS = [("Aspirin and warfarin were given .", (0, 2)), ("Lithium carbonate and heparin .", (0, 3)),
         ("naproxen then aspirin .", (0, 2))]


def linked_pipeline(kb_dir, discovery):  # noqa: F811
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "precision": "fp32", "threshold": 0.9999})  # all NIL
    nlp.add_pipe("pel_discovery", config=discovery)
    return nlp


def docs(nlp):
    out = []
    for text, (a, b) in TEXTS:
        doc = nlp.make_doc(text)
        doc.ents = [Span(doc, a, a + 1, label="Chemical"), Span(doc, b, b + 1, label="Chemical")]
        out.append(doc)
    return out


@pytest.mark.parametrize("linking", ["pipeline", "cluster"])
def test_component_takes_the_mention_floor_discover_takes(kb, linking):  # noqa: F811
    clusters = {}
    for floor in (-1.0, 1.5):
        nlp = linked_pipeline(kb, {"linking": linking, "mention_threshold": floor, "k": 3, "mention_margin": 0.0,
                                   **({"threshold": 0.9999} if linking == "cluster" else {})})
        linked = list(nlp.pipe(docs(nlp)))
        ids = [e.kb_id_ for d in linked for e in d.ents]
        assert all(i.startswith("NIL:") for i in ids), ids
        clusters[floor] = len(set(ids))
        # the same as the library function given the same floor
        expected = discover(nlp, docs(nlp), k=3, linking=linking, mention_threshold=floor, mention_margin=0.0,
                            **({"threshold": 0.9999} if linking == "cluster" else {}))
        assert expected["nil_clusters"] == clusters[floor]
    assert clusters[1.5] == 6  # no two mentions are 1.5 similar: each its own cluster
    assert clusters[-1.0] < 6  # every mention edge kept: nearest mentions join


def test_pipeline_mode_without_a_floor_joins_the_nearest(kb):  # noqa: F811
    nlp = linked_pipeline(kb, {"linking": "pipeline", "k": 3})
    assert nlp.get_pipe("pel_discovery").mention_threshold is None  # the default: as discover --linking pipeline
    assert len({e.kb_id_ for d in nlp.pipe(docs(nlp)) for e in d.ents}) < 6
