import numpy as np
import pytest
import spacy
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.corpora import GOLD_KEY, read_docbin, write_docbin
from spacy_pel.evaluation.okb import make_okb, removed_ids
from spacy_pel.files import InputError
from spacy_pel.kb import Entity
from spacy_pel.retrieval.index import EntityIndex


def test_removed_ids_follow_tree_branches():
    ents = [
        Entity("D1", "epilepsy", extra={"tree_numbers": ["C10.228.140"]}),
        Entity("D2", "flu", extra={"tree_numbers": ["C01.925"]}),
        Entity("C1", "a rare epilepsy", extra={"mapped_to": ["D1"]}),
        Entity("C2", "mixed", extra={"mapped_to": ["D1", "D2"]}),
    ]
    assert removed_ids(ents, ["C10"]) == {"D1", "C1"}


def test_make_okb_cuts_kb_and_relabels(kb_dir, tmp_path):
    from .test_evaluate import gold_doc

    nlp = spacy.blank("en")
    write_docbin([gold_doc(nlp, [(0, 2, "D1"), (4, 6, "D2|D3"), (7, 9, "D3")])], tmp_path / "dev.spacy")
    full = EntityIndex.from_disk(kb_dir)
    # give D3 a tree number so that it falls under the removed branch (records read are copies)
    entities = list(full.entities)
    entities[2].extra["tree_numbers"] = ["C10.1"]
    full = EntityIndex(entities, full.embeddings, metric=full.metric, fingerprint=full.fingerprint)
    full.to_disk(kb_dir)
    report = make_okb(kb_dir, ["C10"], [tmp_path / "dev.spacy"], tmp_path / "okb")
    assert report["removed_entities"] == 1
    assert report["corpora"]["dev.spacy"] == {"mentions": 3, "to_nil": 1, "partly_removed": 1}
    okb = EntityIndex.from_disk(tmp_path / "okb" / "kb")
    assert [e.id for e in okb.entities] == ["D1", "D2", "D4", "D5"]
    np.testing.assert_allclose(okb.searcher.reconstruct_n(0, 4), full.searcher.reconstruct_n(0, 5)[[0, 1, 3, 4]])
    (doc,) = read_docbin(nlp, tmp_path / "okb" / "dev.spacy")
    assert [s.kb_id_ for s in doc.spans[GOLD_KEY]] == ["D1", "D2", "NIL"]
    assert [e.kb_id_ for e in doc.ents] == ["D1", "D2", "NIL"]


def test_a_branch_that_matches_nothing_is_refused_before_anything_is_written(kb_dir, tmp_path):
    with pytest.raises(InputError, match="no entity is under Z99"):
        make_okb(kb_dir, ["Z99"], [], tmp_path / "okb")
    assert not (tmp_path / "okb").exists()
    write_docbin([spacy.blank("en")("a b")], tmp_path / "dev.spacy")
    result = CliRunner().invoke(app, ["okb", "--kb", str(kb_dir), "--remove", "Z99", "--corpus", str(tmp_path / "dev.spacy"),
                                      "-o", str(tmp_path / "okb")])
    assert result.exit_code == 2 and "nothing would be removed" in result.output and "Traceback" not in result.output
