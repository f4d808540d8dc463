"""``pel_linker`` as spaCy's own components behave: spaCy's error handler, a DocBin round trip of what it
writes, a pipeline pickled (``nlp.pipe(n_process=…)`` with spawned processes), and a bf16 KB search whose
ranking does not depend on float noise (how documents were batched)."""
import pickle
import shutil

import numpy as np
import pytest
import spacy
import torch
from spacy.tokens import DocBin
from spacy.util import ignore_error

from spacy_pel.files import InputError
from spacy_pel.retrieval.search import FlatSearch
from tests.test_linker import linked, make_doc


@pytest.fixture
def nlp(kb_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3})
    return nlp


def test_the_error_handler_decides_what_a_failing_batch_does(nlp, monkeypatch):
    """Defect: pel_linker's __call__ and pipe left out spaCy's error handler: with
    nlp.set_error_handler(ignore_error), one failing document still stopped the whole nlp.pipe run."""
    linker = nlp.get_pipe("pel_linker")
    predict = linker.predict

    def failing(docs):
        if any("boom" in d.text for d in docs):
            raise RuntimeError("a rule failed")
        return predict(docs)

    monkeypatch.setattr(linker, "predict", failing)
    docs = [make_doc(nlp), make_doc(nlp, "boom " * 12), make_doc(nlp)]
    with pytest.raises(RuntimeError, match="a rule failed"):  # the default handler raises
        list(nlp.pipe(docs, batch_size=1))
    nlp.set_error_handler(ignore_error)
    out = list(nlp.pipe([make_doc(nlp), make_doc(nlp, "boom " * 12), make_doc(nlp)], batch_size=1))
    assert len(out) == 2 and all(d.ents[0].kb_id_ for d in out)


def test_candidates_come_back_from_a_docbin_as_lists(nlp):
    """Defect: after DocBin(store_user_data=True), span._.pel_candidates were tuples of tuples."""
    doc = nlp(make_doc(nlp))
    stored = DocBin(store_user_data=True, docs=[doc]).to_bytes()
    (back,) = DocBin().from_bytes(stored).get_docs(nlp.vocab)
    assert linked(back) == linked(doc)
    assert isinstance(back.ents[0]._.pel_candidates, list) and isinstance(back.ents[0]._.pel_candidates[0], list)


def test_a_loaded_pipeline_pickles_and_links_as_before(nlp, tmp_path):
    """Defect: a loaded pipeline could not be pickled (the KB's mapped records file, the scorer and the span
    extensions' closures), so nlp.pipe(n_process=2) failed where spaCy spawns its workers (macOS,
    Windows, Linux from Python 3.14)."""
    expected = linked(nlp(make_doc(nlp)))
    nlp.to_disk(tmp_path / "pipe")
    loaded = spacy.load(tmp_path / "pipe")
    assert linked(pickle.loads(pickle.dumps(loaded))(make_doc(nlp))) == expected
    shutil.rmtree(tmp_path / "pipe")  # the records file is gone: its bytes travel instead
    assert linked(pickle.loads(pickle.dumps(loaded))(make_doc(nlp))) == expected
    assert pickle.loads(pickle.dumps(loaded.get_pipe("pel_linker").scorer)) is not None


def test_bf16_search_ranks_rows_that_tie_in_bf16_by_their_exact_scores():
    """Defect: a bf16 KB search ranked by bf16 products, in steps of ~0.004: near-equal rows tied, and which
    came first depended on float noise in the query, i.e. on what it was batched with."""
    matrix = torch.eye(4, dtype=torch.bfloat16)
    queries = np.array([[0.9000, 0.9001, 0.1, 0.0], [0.9001, 0.9000, 0.1, 0.0]], np.float32)
    scores, rows = FlatSearch(matrix).search(queries, 2)
    assert rows.tolist() == [[1, 0], [0, 1]]
    np.testing.assert_allclose(scores, [[0.9001, 0.9], [0.9001, 0.9]], atol=1e-6)


def test_a_missing_alias_counts_file_is_named_with_the_setting(kb_dir, tmp_path):
    """Defect: a rule's `aliases` naming no file raised a bare FileNotFoundError at the first call."""
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "rules": {
        "aliases": {"@misc": "spacy_pel.rules.alias_table.v1", "aliases": str(tmp_path / "missing.json")}}})
    with pytest.raises(InputError, match=r"alias counts .*missing.json not found .*`aliases`.*spacy_pel aliases"):
        nlp(make_doc(nlp))
