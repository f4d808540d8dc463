import json

import numpy as np
import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli.evaluate import app
from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.evaluation.linking import evaluate
from spacy_pel.evaluation.metrics import average_precision


def gold_doc(nlp, spans):
    doc = nlp.make_doc("Lithium carbonate toxicity caused tricuspid regurgitation and atrial flutter in a newborn")
    doc.spans[GOLD_KEY] = [Span(doc, a, b, label="X", kb_id=k) for a, b, k in spans]
    doc.ents = list(doc.spans[GOLD_KEY])
    return doc


def test_average_precision():
    assert average_precision(np.array([1, 0, 1]), np.array([0.9, 0.8, 0.1])) == pytest.approx((1 + 2 / 3) / 2)
    assert average_precision(np.array([1, 1, 0]), np.array([0.9, 0.8, 0.1])) == 1.0


def test_groups_and_recall(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    docs = [gold_doc(nlp, [(0, 2, "D1"), (4, 6, "D2|D9"), (7, 9, "NIL"), (11, 12, "GONE")])]
    report = evaluate(linker, docs, train_ids={"D1"}, threshold=-1.0)
    assert report["counts"] == {"in_kb": 2, "absent": 1, "nil": 1, "seen": 1, "unseen": 1}
    assert report["recall_in_kb"]["R@64"] == 1.0  # 5 entities: every gold id is in the top 64
    assert report["recall_all_linkable"]["R@64"] == pytest.approx(2 / 3, abs=1e-3)
    assert report["nil"]["r"] == 0.0  # threshold -1: nothing is NIL
    strict = evaluate(linker, docs, threshold=2.0)
    assert strict["nil"]["r"] == 1.0 and strict["nil"]["p"] == 0.25
    # the component's own annotations are untouched by evaluation
    assert [e.kb_id_ for e in docs[0].ents] == ["D1", "D2|D9", "NIL", "GONE"]

    write_docbin(docs, tmp_path / "gold.spacy")
    out = tmp_path / "m.json"
    result = CliRunner().invoke(app, [str(tmp_path / "gold.spacy"), "--kb", str(kb_dir), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["counts"]["in_kb"] == 2 and "R@64" in result.output
