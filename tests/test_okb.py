import json

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

from .test_cli_errors import one_line_error


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


def set_extras(kb_dir, extras):
    """Rewrite the KB folder with ``extras`` (id → extra fields) merged into those entities' records."""
    full = EntityIndex.from_disk(kb_dir)
    entities = list(full.entities)
    for e in entities:
        e.extra.update(extras.get(e.id, {}))
    EntityIndex(entities, full.embeddings, metric=full.metric, fingerprint=full.fingerprint).to_disk(kb_dir)


def okb_cli(kb, corpora, output, *branches):
    args = ["okb", "--kb", str(kb), *(a for b in branches or ["Disease"] for a in ("--remove", b))]
    return CliRunner().invoke(app, [*args, *(a for c in corpora for a in ("--corpus", str(c))), "-o", str(output)])


def a_corpus(path, ids=("D1", "D2", "D3")):
    from .test_evaluate import gold_doc

    path.parent.mkdir(parents=True, exist_ok=True)
    write_docbin([gold_doc(spacy.blank("en"), list(zip((0, 4, 7), (2, 6, 9), ids)))], path)
    return path


def test_branches_are_whole_tree_numbers_or_types():
    ents = [Entity(f"D{t}", t, types=["Chemical"] if t == "D01" else [], extra={"tree_numbers": [t]})
            for t in ("C1", "C1.2", "C10", "C14.5", "C15", "D01")]
    assert removed_ids(ents, ["C1"]) == {"DC1", "DC1.2"}
    assert removed_ids(ents, ["C14"]) == {"DC14.5"}
    assert removed_ids(ents, ["C1.2"]) == {"DC1.2"}
    assert removed_ids(ents, ["Chemical"]) == {"DD01"}
    assert removed_ids(ents, ["C"]) == {"DC1", "DC1.2", "DC10", "DC14.5", "DC15"}  # a MeSH category


def test_a_branch_that_removes_nothing_beside_others_is_refused(kb_dir, tmp_path):
    set_extras(kb_dir, {"D2": {"tree_numbers": ["C10.1"]}, "D3": {"tree_numbers": ["C100.2"]}})
    result = okb_cli(kb_dir, [a_corpus(tmp_path / "dev.spacy")], tmp_path / "okb", "C10", "C1")
    one_line_error(result, "no entity is under C1 ")
    assert not (tmp_path / "okb").exists()
    assert okb_cli(kb_dir, [tmp_path / "dev.spacy"], tmp_path / "okb", "C10").exit_code == 0
    assert [e.id for e in EntityIndex.from_disk(tmp_path / "okb" / "kb").entities] == ["D1", "D3", "D4", "D5"]


def test_an_alternative_id_of_a_removed_entity_becomes_nil(kb_dir, tmp_path):
    set_extras(kb_dir, {"D3": {"alt_ids": ["OMIM:100"]}, "D1": {"alt_ids": ["OMIM:1"]}})
    corpus = a_corpus(tmp_path / "dev.spacy", ("OMIM:1", "D1|OMIM:100", "OMIM:100"))
    report = make_okb(kb_dir, ["Disease"], [corpus], tmp_path / "okb")
    assert report["corpora"]["dev.spacy"] == {"mentions": 3, "to_nil": 1, "partly_removed": 1}
    (doc,) = read_docbin(spacy.blank("en"), tmp_path / "okb" / "dev.spacy")
    assert [s.kb_id_ for s in doc.spans[GOLD_KEY]] == ["OMIM:1", "D1", "NIL"]


@pytest.mark.parametrize("where", ["beside", "kb", "in_kb"])
def test_an_output_over_its_inputs_is_refused_before_writing(kb_dir, tmp_path, where):
    corpus = a_corpus(tmp_path / "dev.spacy")
    output = {"beside": tmp_path, "kb": kb_dir, "in_kb": kb_dir / "okb"}[where]
    before = {p: p.read_bytes() for p in [corpus, *kb_dir.rglob("*")] if p.is_file()}
    one_line_error(okb_cli(kb_dir, [corpus], output), f"output {output}")
    assert {p: p.read_bytes() for p in [corpus, *kb_dir.rglob("*")] if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.spacy", "kb", "kb.jsonl"]


def test_an_output_folder_of_other_files_is_refused(kb_dir, tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    one_line_error(okb_cli(kb_dir, [a_corpus(tmp_path / "c" / "dev.spacy")], tmp_path / "mine"), "other files")
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


def test_two_corpora_of_one_file_name_are_refused(kb_dir, tmp_path):
    a, b = a_corpus(tmp_path / "a" / "dev.spacy"), a_corpus(tmp_path / "b" / "dev.spacy", ("D1", "D1", "D1"))
    one_line_error(okb_cli(kb_dir, [a, b], tmp_path / "okb"), str(a), str(b), "same file name")
    assert not (tmp_path / "okb").exists()


def test_a_failed_run_leaves_the_previous_output_whole(kb_dir, tmp_path):
    from spacy_pel.files import folder_digest

    first, second = a_corpus(tmp_path / "c" / "first.spacy"), a_corpus(tmp_path / "c" / "second.spacy")
    assert okb_cli(kb_dir, [first, second], tmp_path / "okb", "Chemical").exit_code == 0
    old = folder_digest(tmp_path / "okb")
    (tmp_path / "bad.spacy").write_text("not a docbin")
    one_line_error(okb_cli(kb_dir, [first, tmp_path / "bad.spacy"], tmp_path / "okb", "Disease"), "bad.spacy")
    assert folder_digest(tmp_path / "okb") == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.spacy", "c", "kb", "kb.jsonl", "okb"]  # no leftovers
    assert okb_cli(kb_dir, [first], tmp_path / "okb", "Disease").exit_code == 0  # a new run: nothing of the old one left
    assert sorted(p.name for p in (tmp_path / "okb").iterdir()) == ["first.spacy", "kb", "okb_report.json"]
    report = json.loads((tmp_path / "okb" / "okb_report.json").read_text())
    assert report["branches"] == ["Disease"] and list(report["corpora"]) == ["first.spacy"]
