"""The demo chain end to end with the real default encoder on bundled real data (minutes)."""
import json
from pathlib import Path

import pytest
import spacy

from spacy_pel.corpora import convert, read_docbin
from spacy_pel.evaluation.linking import evaluate
from spacy_pel.retrieval.build import build_kb

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "demo"


@pytest.mark.slow
def test_demo_chain(tmp_path):
    stats = convert(ASSETS / "bc5cdr_dev_sample.PubTator.txt", tmp_path / "demo.spacy")
    report = build_kb(ASSETS / "mesh", tmp_path / "kb", format="mesh", progress=False)
    assert report["entities_total"] == 2604
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"kb": str(tmp_path / "kb")})
    docs = read_docbin(nlp, tmp_path / "demo.spacy")
    metrics = evaluate(linker, docs)
    assert metrics["mentions"] == stats["mentions"]
    # the untrained encoder is far from random on real data (random would be ~1/2604)
    assert metrics["recall_in_kb"]["R@1"] > 0.5 and metrics["recall_in_kb"]["R@64"] > 0.85
    nlp.to_disk(tmp_path / "pipe")
    linked = list(spacy.load(tmp_path / "pipe").pipe(read_docbin(nlp, tmp_path / "demo.spacy")))
    assert sum(e.kb_id_ != "" for d in linked for e in d.ents) == stats["mentions"]
    json.dumps(metrics)
