import json

import faiss
import numpy as np
import pytest
from typer.testing import CliRunner

from spacy_pel.cli.build_kb import app
from spacy_pel.kb import read_kb
from spacy_pel.models.encoder import BiEncoder, EncoderMismatchError
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.index import EntityIndex


def test_build_writes_complete_kb(kb_dir, tiny_encoder_dir):
    meta = json.loads((kb_dir / "meta.json").read_text())
    assert meta["entities"] == 5 and meta["dim"] == 32 and meta["metric"] == "cosine"
    assert meta["encoder_fingerprint"] == BiEncoder.from_pretrained(tiny_encoder_dir).fingerprint()
    index = EntityIndex.from_disk(kb_dir)
    assert [e.id for e in index.entities] == ["D1", "D2", "D3", "D4", "D5"]
    # the index holds the entities' own vectors: each entity retrieves itself first
    scores, rows = index.search(index.embeddings.astype(np.float32), 1)
    assert rows[:, 0].tolist() == [0, 1, 2, 3, 4]
    assert not list(kb_dir.parent.glob("*.partial")) and not list(kb_dir.parent.glob(".kb.tmp-*"))


def test_vectors_read_rows_from_the_saved_file_and_follow_added_entities(kb_dir, tiny_encoder_dir, tmp_path):
    index = EntityIndex.from_disk(kb_dir)
    rows = np.array([[4, 0], [2, 2]])
    got = index.vectors(rows)
    assert got.shape == (2, 2, 32) and got.dtype == np.float32
    np.testing.assert_array_equal(got, np.asarray(index.embeddings, np.float32)[rows])
    new = tmp_path / "new.jsonl"
    new.write_text('{"id": "N1", "name": "famotidine"}\n')
    index.add(list(read_kb(new, format="jsonl")), BiEncoder.from_pretrained(tiny_encoder_dir))
    # an added entity is read from memory, not from the file saved before it existed
    np.testing.assert_array_equal(index.vectors(np.array([5, 1])), np.asarray(index.embeddings[[5, 1]], np.float32))


def test_add_appends_without_reencoding(kb_dir, tiny_encoder_dir, tmp_path):
    before = EntityIndex.from_disk(kb_dir)
    new = tmp_path / "new.jsonl"
    new.write_text('{"id": "N1", "name": "famotidine"}\n{"id": "N2", "name": "delirium"}\n')
    report = build_kb(None, kb_dir, "jsonl", str(tiny_encoder_dir), add=new, progress=False)
    assert report["entities_encoded"] == 2 and report["entities_total"] == 7
    after = EntityIndex.from_disk(kb_dir)
    assert [e.id for e in after.entities][-2:] == ["N1", "N2"]
    np.testing.assert_array_equal(after.embeddings[:5], before.embeddings)
    enc = BiEncoder.from_pretrained(tiny_encoder_dir)
    q = enc.encode_entities(after.entities[5:6])
    assert after.search(q, 1)[1][0, 0] == 5  # the new entity is linkable at once
    with pytest.raises(ValueError, match="already in the KB"):
        build_kb(None, kb_dir, "jsonl", str(tiny_encoder_dir), add=new, progress=False)


def test_add_with_other_encoder_refused(kb_dir, other_tiny_bert, tmp_path):
    new = tmp_path / "new.jsonl"
    new.write_text('{"id": "N1", "name": "famotidine"}\n')
    with pytest.raises(EncoderMismatchError, match="Rebuild the KB"):
        build_kb(None, kb_dir, "jsonl", str(other_tiny_bert), add=new, progress=False)
    assert len(EntityIndex.from_disk(kb_dir)) == 5


def test_refusal_names_the_setting_that_differs(kb_dir, tiny_encoder_dir, other_tiny_bert):
    index = EntityIndex.from_disk(kb_dir)
    built_with = BiEncoder.from_pretrained(tiny_encoder_dir)
    assert json.loads((kb_dir / "meta.json").read_text())["encoder_entity_settings"] == built_with.entity_settings()
    index.check_encoder(built_with)  # the encoder that built it passes
    longer = built_with.config.entity_max_length * 2
    with pytest.raises(EncoderMismatchError, match=rf"its entity_max_length is {longer}, the KB's "
                                                   rf"{built_with.config.entity_max_length} \(a training command's --encoder.entity_max_length"):
        index.check_encoder(BiEncoder.from_pretrained(tiny_encoder_dir, entity_max_length=longer))
    with pytest.raises(EncoderMismatchError, match="settings agree, so the entity tower's weights"):
        index.check_encoder(BiEncoder.from_pretrained(other_tiny_bert, entity_max_length=built_with.config.entity_max_length))
    # a KB written before the settings were recorded is still refused, without naming a setting
    index.entity_settings = {}
    with pytest.raises(EncoderMismatchError, match="weights, vocabulary or settings differ"):
        index.check_encoder(BiEncoder.from_pretrained(tiny_encoder_dir, entity_max_length=longer))


def test_failed_write_keeps_old_kb(kb_dir, tiny_encoder_dir, tmp_path, monkeypatch):
    new = tmp_path / "new.jsonl"
    new.write_text('{"id": "N1", "name": "famotidine"}\n')

    def broken(*args, **kwargs):
        raise OSError("disk full")

    # the last file of the folder: the vectors are written after the entity table
    monkeypatch.setattr(np, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        build_kb(None, kb_dir, "jsonl", str(tiny_encoder_dir), add=new, progress=False)
    monkeypatch.undo()
    assert len(EntityIndex.from_disk(kb_dir)) == 5
    assert not [p for p in kb_dir.parent.iterdir() if p.name.startswith(".kb.")]


def test_resume_reuses_finished_chunks(kb_file, tiny_encoder_dir, tmp_path, monkeypatch):
    import spacy_pel.retrieval.build as bk

    monkeypatch.setattr(bk, "CHUNK", 2)
    out = tmp_path / "kb"
    calls, fail = [], [True]
    original = BiEncoder.encode_entities

    def failing(self, entities, **kw):
        calls.append(len(entities))
        if len(calls) == 2 and fail[0]:
            fail[0] = False
            raise RuntimeError("interrupted")
        return original(self, entities, **kw)

    monkeypatch.setattr(BiEncoder, "encode_entities", failing)
    with pytest.raises(RuntimeError, match="interrupted"):
        build_kb(kb_file, out, "jsonl", str(tiny_encoder_dir), progress=False)
    assert not out.exists() and len(list((tmp_path / "kb.partial").glob("chunk_*.npy"))) == 1
    calls.clear()
    build_kb(kb_file, out, "jsonl", str(tiny_encoder_dir), progress=False)
    assert calls == [2, 1]  # chunk 0 came from disk
    fresh = tmp_path / "fresh"
    monkeypatch.setattr(BiEncoder, "encode_entities", original)
    build_kb(kb_file, fresh, "jsonl", str(tiny_encoder_dir), progress=False)
    np.testing.assert_allclose(EntityIndex.from_disk(out).embeddings, EntityIndex.from_disk(fresh).embeddings)


def test_hnsw_index_and_cli(kb_file, tiny_encoder_dir, tmp_path):
    out = tmp_path / "kb_hnsw"
    result = CliRunner().invoke(
        app, ["--kb", str(kb_file), "--output", str(out), "--encoder", str(tiny_encoder_dir), "--index", "hnsw"]
    )
    assert result.exit_code == 0, result.output
    index = EntityIndex.from_disk(out)
    assert index.kind == "hnsw" and isinstance(index.searcher, faiss.IndexHNSWFlat)
    assert index.search(index.embeddings.astype(np.float32), 1)[1][:, 0].tolist() == [0, 1, 2, 3, 4]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "A", "name": "x"}\n{"id": "A", "name": "y"}\n')
    result = CliRunner().invoke(app, ["--kb", str(bad), "--output", str(tmp_path / "x"), "--encoder", str(tiny_encoder_dir)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {bad}:2: duplicate entity id 'A'")
    assert not (tmp_path / "x").exists()


def test_vector_file_reads_any_rows_in_any_order(tmp_path):
    from spacy_pel.retrieval.search import VectorFile

    matrix = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float16)
    np.save(tmp_path / "m.npy", matrix)
    file = VectorFile(tmp_path / "m.npy")
    rng = np.random.default_rng(1)
    for idx in ([], [7], [3, 4, 5, 9, 4, 0, 49, 48, 3], rng.integers(0, 50, 200), np.arange(50)[::-1]):
        idx = np.asarray(idx, dtype=np.int64)
        got = file.rows(idx)
        assert got.shape == (len(idx), 8) and got.dtype == np.float32
        np.testing.assert_array_equal(got, matrix[idx].astype(np.float32))


def test_vector_file_prefetch_reads_the_whole_file_on_a_thread(tmp_path, monkeypatch):
    import threading

    from spacy_pel.retrieval import search

    matrix = np.random.default_rng(0).normal(size=(3000, 16)).astype(np.float16)
    np.save(tmp_path / "m.npy", matrix)
    file = search.VectorFile(tmp_path / "m.npy")
    done = []
    real = search._read_through
    monkeypatch.setattr(search, "PREFETCH_CHUNK", 4096)  # several reads
    monkeypatch.setattr(search, "_read_through", lambda path: done.append((threading.current_thread().name, real(path))))
    assert file.prefetch()
    for thread in threading.enumerate():
        if thread.name == "pel-prefetch":
            thread.join(10)
    assert done == [("pel-prefetch", (tmp_path / "m.npy").stat().st_size)]
    np.testing.assert_array_equal(file.rows(np.arange(3000)), matrix.astype(np.float32))
    monkeypatch.setattr(search, "PREFETCH_SHARE", 0.0)  # a file larger than its share of free memory
    assert not file.prefetch() and len(done) == 1
