"""visualize and entity discovery: the given mentions a span finder must not see, a span-group linker and an
overlapping mention with pel_discovery after it, a DocBin with doc.ents only, calibrate and pel_discovery, and
discover()'s candidates agreeing with its ids."""
import numpy as np
import pytest
import spacy
import torch
from spacy.tokens import DocBin, Span

from spacy_pel.corpora import read_docbin
from spacy_pel.discovery.cluster import discover
from spacy_pel.discovery.component import discover_linked
from spacy_pel.evaluation.nil import check_discovery_settings
from spacy_pel.evaluation.visualize import link_docs
from spacy_pel.files import InputError
from spacy_pel.models.span_scorer import SpanScorer
from spacy_pel.pipeline.given_mentions import GivenMentions
from tests.test_raw_text_s71 import save_finder_pipeline


@pytest.fixture(scope="module")
def kb(module_kb_dir):
    return module_kb_dir


def corpus(tmp_path, pubtator: str):
    from typer.testing import CliRunner

    from spacy_pel.cli import convert

    (tmp_path / "c.pubtator").write_text(pubtator, encoding="utf8")
    r = CliRunner().invoke(convert.app, [str(tmp_path / "c.pubtator"), str(tmp_path / "c.spacy")])
    assert r.exit_code == 0, r.output
    return tmp_path / "c.spacy"


def pipeline(kb, mentions=None, discovery=None):
    nlp = spacy.blank("en")
    config = {"kb": str(kb), "precision": "fp32", "threshold": 0.0}
    if mentions:
        config["mentions"] = mentions
    nlp.add_pipe("pel_linker", config=config)
    if discovery is not None:
        nlp.add_pipe("pel_discovery", config=discovery)
    return nlp


def test_visualize_span_finder_reads_raw_text(kb, tiny_encoder_dir, tmp_path, monkeypatch):
    # every one-token span is a mention: a given span cutting `Lithiumcarbonate` must not make `carbonate` one
    monkeypatch.setattr(SpanScorer, "probs", lambda self, H, st, en: torch.as_tensor(
        np.where(np.asarray(en) - np.asarray(st) == 1, 0.9, 0.1), dtype=torch.float32))
    path = save_finder_pipeline(kb, tiny_encoder_dir, tmp_path / "pipe")
    nlp = spacy.load(path)
    title = "Atrial flutter followed lithium"
    spacy_file = corpus(tmp_path, f"7|t|{title}\n7|a|Lithiumcarbonate toxicity .\n"
                                  f"7\t{len(title) + 1}\t{len(title) + 8}\tLithium\tChemical\tD1\n\n")
    docs, _ = link_docs(nlp, read_docbin(nlp, spacy_file))
    drawn = [e.text for d in docs for e in d.ents]
    assert "Lithiumcarbonate" in drawn and "carbonate" not in drawn and "Lithium" not in drawn


GIVEN = ("1|t|Aspirin and tricuspid regurgitation.\n1|a|Warfarin too.\n1\t0\t7\tAspirin\tChemical\tD4\n"
         "1\t12\t35\ttricuspid regurgitation\tDisease\tD2\n1\t37\t45\tWarfarin\tChemical\tD5\n\n")


def test_span_group_linker_with_discovery_links_given_mentions(kb, tmp_path):
    nlp = pipeline(kb, {"@misc": "spacy_pel.mentions.span_group.v1", "spans_key": "sc"}, {})
    spacy_file = corpus(tmp_path, GIVEN)
    given = GivenMentions(nlp)  # as link and bulk: doc.ents linked, which pel_discovery then sees
    linked = given.pipe(read_docbin(nlp, spacy_file))
    assert [s.text for s in given.linked_spans(linked[0])] == ["Aspirin", "tricuspid regurgitation", "Warfarin"]
    assert all(s.kb_id_ for s in given.linked_spans(linked[0]))
    docs, not_drawn = link_docs(nlp, read_docbin(nlp, spacy_file))
    assert [e.text for e in docs[0].ents] == ["Aspirin", "tricuspid regurgitation", "Warfarin"] and not_drawn == 0


def test_visualize_discovery_counts_overlapping_mention(kb, tmp_path):
    spacy_file = corpus(tmp_path, "11|t|Tricuspid regurgitation and aspirin.\n11|a|None.\n"
                                  "11\t0\t23\tTricuspid regurgitation\tDisease\tD2\n11\t0\t9\tTricuspid\tDisease\t-1\n"
                                  "11\t28\t35\taspirin\tChemical\tD1\n\n")
    for discovery in (None, {}):
        nlp = pipeline(kb, discovery=discovery)
        docs, not_drawn = link_docs(nlp, read_docbin(nlp, spacy_file))
        assert [e.text for e in docs[0].ents] == ["Tricuspid regurgitation", "aspirin"]
        assert not_drawn == 1, discovery  # linked (and clustered), not drawn, counted


def test_visualize_docbin_with_ents_only(kb, tmp_path):
    nlp = pipeline(kb)
    doc = nlp.make_doc("Aspirin and warfarin were given .")
    doc.ents = [Span(doc, 0, 1, label="Chemical", kb_id="D4"), Span(doc, 2, 3, label="Chemical", kb_id="D5")]
    DocBin(docs=[doc], store_user_data=True).to_disk(tmp_path / "ents.spacy")
    docs, _ = link_docs(nlp, read_docbin(nlp, tmp_path / "ents.spacy"))
    assert [e.text for e in docs[0].ents] == ["Aspirin", "warfarin"]
    assert all(e._.pel_candidates for e in docs[0].ents)


@pytest.mark.parametrize("discovery", [{"linking": "cluster"}, {"threshold": 0.5}])
def test_calibrate_classifier_refuses_discovery_settings(kb, discovery):
    nlp = pipeline(kb, discovery=discovery)
    check_discovery_settings(nlp, "pel_linker", "top_score")  # the top-score linker takes them
    with pytest.raises(InputError, match="pel_discovery"):
        check_discovery_settings(nlp, "pel_linker", "classifier")
    check_discovery_settings(pipeline(kb, discovery={}), "pel_linker", "classifier")  # auto, no threshold: fine


def test_discover_evidence_agrees_with_pel_discovery(kb):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb), "precision": "fp32", "threshold": 0.85})
    texts = ["aspirin and warfarin and lithium", "flutter and aspirin", "foo bar baz warfarin", "zzz qqq aspirin"]

    def linked():
        docs = []
        for text in texts:
            d = nlp.make_doc(text)
            d.ents = [Span(d, i, i + 1, label="Chemical") for i, t in enumerate(d) if t.text != "and"]
            docs.append(d)
        return list(nlp.pipe(docs))

    a, b = linked(), linked()
    discover(nlp, a, linking="cluster")
    discover_linked(nlp.get_pipe("pel_linker"), b, linking="cluster")
    for sa, sb in zip([s for d in a for s in d.ents], [s for d in b for s in d.ents]):
        assert (sa.kb_id_, sa._.pel_candidates, sa._.pel_confidence) == (sb.kb_id_, sb._.pel_candidates, sb._.pel_confidence)
        if not sa.kb_id_.startswith("NIL"):
            assert sa._.pel_candidates[0][0] == sa.kb_id_
