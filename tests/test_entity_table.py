"""The KB folder's entity table (columns, records on demand, name index) and the exact torch search."""
import json
import shutil

import numpy as np
import pytest
import torch

from spacy_pel.kb import Entity, normalize
from spacy_pel.models import top_k
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.retrieval.search import FlatSearch, read_matrix
from spacy_pel.retrieval.table import COLUMNS, EntityTable, NameIndex, compact_key

ENTITIES = [
    Entity("D1", "Lithium carbonate", ["Li2CO3", "lithium-carbonate"], ["Chemical"], "a salt", {"alt_ids": ["X1"]}),
    Entity("D2", "Atrial flutter", ["flutter"], ["Disease"]),
    Entity("D3", "Flutter", [], ["Disease", "Sign"], "", {"tree_numbers": ["C1.2"]}),
    Entity("D4", "Ünïcode näme", ["lithium carbonate"], []),
]


def test_table_round_trip_reads_records_on_demand(tmp_path):
    EntityTable(ENTITIES).write(tmp_path)
    table = EntityTable.read(tmp_path)
    assert table.ids == ["D1", "D2", "D3", "D4"] and table.names[3] == "Ünïcode näme"
    assert list(table.types) == [["Chemical"], ["Disease"], ["Disease", "Sign"], []]
    assert list(table) == ENTITIES and table[-1] == ENTITIES[-1] and table[1:3] == ENTITIES[1:3]
    with pytest.raises(IndexError):
        table[4]


def test_name_index_maps_every_name_and_synonym(tmp_path):
    names = NameIndex.build(ENTITIES)
    # D1's name and its synonym "lithium-carbonate" share a key (D1 once), and D4's synonym
    assert names.get(normalize("Lithium-Carbonate")) == [0, 3]
    assert sorted(names.get("flutter")) == [1, 2] and names.get("atrial") is None
    assert "li2co3" in names and "nothing" not in names
    EntityTable(ENTITIES).write(tmp_path)
    read = EntityTable.read(tmp_path).name_index()
    assert read.keys == names.keys and read.get("flutter") == names.get("flutter")


def test_records_survive_the_folder_going_and_added_entities_follow(tmp_path):
    EntityTable(ENTITIES[:2]).write(tmp_path / "a")
    table = EntityTable.read(tmp_path / "a")
    shutil.rmtree(tmp_path / "a")  # a pipeline read from bytes: its temporary folder is gone
    table.extend(ENTITIES[2:])
    assert list(table) == ENTITIES and table.name_index().get("flutter") == [1, 2]
    table.write(tmp_path / "b")
    assert list(EntityTable.read(tmp_path / "b")) == ENTITIES


def test_old_folder_without_columns_is_read_from_the_records(tmp_path):
    EntityTable(ENTITIES).write(tmp_path)
    (tmp_path / COLUMNS).unlink()
    table = EntityTable.read(tmp_path)
    assert list(table) == ENTITIES and table.name_index().get("li2co3") == [0]


def test_disagreeing_columns_are_refused(tmp_path):
    EntityTable(ENTITIES).write(tmp_path)
    offsets = np.load(tmp_path / "ids.offsets.npy")
    np.save(tmp_path / "ids.offsets.npy", offsets[:-1])  # one id fewer than records
    with pytest.raises(ValueError, match="disagree"):
        EntityTable.read(tmp_path)


def unit_rows(n, d, seed):
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_flat_search_is_exact(precision, monkeypatch):
    monkeypatch.setattr(top_k, "SCORES_PER_CALL", 500)  # several query chunks
    table, queries = unit_rows(300, 16, 0), unit_rows(7, 16, 1)
    scores, rows = FlatSearch.from_array(table, precision).search(queries, 5)
    exact = queries @ table.T
    best = np.argsort(-exact, axis=1)[:, :5]
    tol = 1e-6 if precision == "fp32" else 2e-2  # bf16 inputs: ~3 significant digits
    np.testing.assert_allclose(scores, np.take_along_axis(exact, rows, 1), atol=tol)
    if precision == "fp32":
        np.testing.assert_array_equal(rows, best)
    else:  # bf16 may swap near-ties only: the scores it found are the best ones within rounding
        np.testing.assert_allclose(np.take_along_axis(exact, rows, 1), np.take_along_axis(exact, best, 1), atol=tol)
    assert rows.dtype == np.int64 and scores.dtype == np.float32


def test_read_matrix_by_chunks_equals_np_load(tmp_path, monkeypatch):
    import spacy_pel.retrieval.search as search

    monkeypatch.setattr(search, "READ_ROWS", 3)
    table = unit_rows(10, 4, 2).astype(np.float16)
    np.save(tmp_path / "m.npy", table)
    got = read_matrix(tmp_path / "m.npy", torch.float32)
    np.testing.assert_array_equal(got.numpy(), table.astype(np.float32))


def test_index_round_trip_without_faiss_file_for_flat(tmp_path):
    vectors = unit_rows(4, 8, 3)
    index = EntityIndex(ENTITIES, vectors, metric="cosine", fingerprint="f", precision="fp32")
    index.to_disk(tmp_path / "kb")
    assert not (tmp_path / "kb" / "index.faiss").exists()
    loaded = EntityIndex.from_disk(tmp_path / "kb", precision="fp32")
    assert loaded.row == {"D1": 0, "D2": 1, "D3": 2, "D4": 3}
    _, rows = loaded.search(vectors, 1)
    assert rows[:, 0].tolist() == [0, 1, 2, 3]
    hnsw = EntityIndex(ENTITIES, vectors, metric="cosine", fingerprint="f", kind="hnsw")
    hnsw.to_disk(tmp_path / "hnsw")
    assert (tmp_path / "hnsw" / "index.faiss").exists()
    assert EntityIndex.from_disk(tmp_path / "hnsw").search(vectors, 1)[1][:, 0].tolist() == [0, 1, 2, 3]


def test_kb_files_get_the_usual_permissions(tmp_path):
    import os

    umask = os.umask(0o022)
    try:
        EntityTable(ENTITIES).write(tmp_path)
        EntityIndex(ENTITIES, unit_rows(4, 8, 3), metric="cosine", fingerprint="f").to_disk(tmp_path / "kb")
    finally:
        os.umask(umask)
    for path in (tmp_path / "kb" / "entities.jsonl", tmp_path / "kb" / "meta.json"):
        assert path.stat().st_mode & 0o777 == 0o644, path  # not mkstemp's 0600: others can read a shared KB


def test_ivfpq_index_rescores_exactly_and_round_trips(tmp_path):
    """The compressed kind for millions of entities: PQ candidates, then exact scores from the saved vectors."""
    n = 12_000
    vectors = unit_rows(n, 16, 4)
    entities = [Entity(f"E{i}", f"entity {i}") for i in range(n)]
    index = EntityIndex(entities, vectors, metric="cosine", fingerprint="f", kind="ivfpq")
    queries = vectors[:200] + 0.05 * unit_rows(200, 16, 5)
    scores, rows = index.search(queries, 5)
    saved = vectors.astype(np.float16).astype(np.float32)  # what it rescores with: the saved float16 vectors
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", queries, saved[rows]), atol=1e-5)  # exact scores
    assert (np.diff(scores, axis=1) <= 1e-6).all()
    exact_top1 = np.argmax(queries @ saved.T, axis=1)
    assert np.mean(rows[:, 0] == exact_top1) > 0.95
    index.to_disk(tmp_path / "kb")
    loaded = EntityIndex.from_disk(tmp_path / "kb")
    assert loaded.kind == "ivfpq" and json.loads((tmp_path / "kb" / "meta.json").read_text())["refine"] == 100
    again_scores, again_rows = loaded.search(queries, 5)
    np.testing.assert_array_equal(again_rows, rows)
    np.testing.assert_allclose(again_scores, scores, atol=1e-6)
    with pytest.raises(ValueError, match="rebuild"):
        loaded.searcher.add(vectors[:1])
    with pytest.raises(ValueError, match="at least 10,000 entities"):
        EntityIndex(entities[:100], vectors[:100], metric="cosine", fingerprint="f", kind="ivfpq")


def test_id_rows_find_every_id_without_a_dict(tmp_path):
    entities = [Entity(f"ID{i % 7}-{i}", f"n{i}") for i in range(50)]
    EntityTable(entities).write(tmp_path)
    table = EntityTable.read(tmp_path)
    rows = table.id_rows()
    assert all(rows[e.id] == i for i, e in enumerate(entities)) and len(rows) == 50
    assert "ID0-0" in rows and "nope" not in rows and None not in rows and rows.get("nope", -1) == -1
    assert sorted(rows) == sorted(e.id for e in entities)
    rows.update({"NEW": 50})
    assert rows["NEW"] == 50 and len(rows) == 51
    with pytest.raises(KeyError):
        rows["missing"]


CODES = [
    Entity("C1", "KF 17837", [], ["Chemical"]),
    Entity("C2", "Ro 15-1788", ["Ro15 1788"], ["Chemical"]),
    Entity("C3", "RO151788", [], ["Chemical"]),
    Entity("C4", "heart attack", [], ["Disease"]),
]


def test_compact_keys_join_code_names_written_with_and_without_spaces(tmp_path):
    assert compact_key(normalize("KF17837")) == compact_key(normalize("KF 17837")) == "kf17837"
    assert compact_key("heart attack") is None  # no digit: spaces matter
    compact = NameIndex.build(CODES).compact()
    assert compact.get("kf17837") == [0]
    assert compact.get("ro151788") == [1]  # two spaced forms of C2 merged; C3's key has no space
    assert compact.get("heartattack") is None and len(compact) == 2
    EntityTable(CODES).write(tmp_path / "new")
    assert EntityTable.read(tmp_path / "new").compact_index().keys == compact.keys
    for name in ("compact_name_keys.bin", "compact_name_ptr.npy", "compact_name_rows.npy"):
        (tmp_path / "new" / name).unlink()  # a KB folder from before: built on first use
    assert EntityTable.read(tmp_path / "new").compact_index().get("kf17837") == [0]
