"""A KB release update: ``build-kb --reuse EARLIER`` and ``build-names --reuse EARLIER`` encode only the
entities (names) whose encoded text the earlier folder lacks and take the others' vectors from it."""
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.retrieval import chunks
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.retrieval.names import NameIndex, build_names

from .conftest import KB_LINES

# the next release: D3 renamed to D33 and moved first (its text unchanged), D2's description changed,
# D5 withdrawn, D6 new
RELEASE = [
    '{"id": "D33", "name": "atrial flutter", "aliases": ["flutter"], "types": ["Disease"]}',
    KB_LINES[0],
    '{"id": "D2", "name": "tricuspid regurgitation", "types": ["Disease"], "description": "a leaking valve"}',
    KB_LINES[3],
    '{"id": "D6", "name": "heparin", "aliases": ["unfractionated heparin"], "types": ["Chemical"]}',
]
CHANGED = {"tricuspid regurgitation", "heparin"}


@pytest.fixture
def release(tmp_path):
    path = tmp_path / "release.jsonl"
    path.write_text("\n".join(RELEASE) + "\n", encoding="utf8")
    return path


def recording(monkeypatch):
    seen = []
    original = BiEncoder.encode_entities

    def encode(self, entities, *a, **k):
        seen.extend(e.name for e in entities)
        return original(self, entities, *a, **k)

    monkeypatch.setattr(BiEncoder, "encode_entities", encode)
    return seen


def test_an_update_encodes_only_the_changed_entities(tmp_path, kb_dir, release, tiny_encoder_dir, monkeypatch):
    full = tmp_path / "full"
    build_kb(release, full, format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    seen = recording(monkeypatch)
    report = build_kb(release, tmp_path / "update", format="jsonl", encoder=str(tiny_encoder_dir), progress=False,
                      reuse=kb_dir)
    assert set(seen) == CHANGED and report["entities_encoded"] == 2 and report["entities_reused"] == 3
    assert report["reused_from"] == str(kb_dir) and report["resume"]["reuse"]["encoded"] == 2
    old, new, ref = (EntityIndex.from_disk(p) for p in (kb_dir, tmp_path / "update", full))
    assert list(new.entities.ids) == ["D33", "D1", "D2", "D4", "D6"]
    # an unchanged entity's row is the earlier one exactly, wherever it moved; all rows as a full build's
    np.testing.assert_array_equal(new.embeddings[0], old.embeddings[old.row["D3"]])
    np.testing.assert_array_equal(new.embeddings[3], old.embeddings[old.row["D4"]])
    np.testing.assert_allclose(new.embeddings.astype(np.float32), ref.embeddings.astype(np.float32), atol=2e-3)
    # the update is a KB like any other: a later build of the same release copies it
    again = build_kb(release, tmp_path / "again", format="jsonl", encoder=str(tiny_encoder_dir), progress=False,
                     reuse=tmp_path / "update")
    assert again["entities_encoded"] == 0 and "copy_s" in again


def test_nothing_is_reused_from_another_precision_or_encoder(tmp_path, kb_dir, release, tiny_encoder_dir, other_tiny_bert):
    stamp = json.loads((kb_dir / "stamp.json").read_text())
    (kb_dir / "stamp.json").write_text(json.dumps({**stamp, "precision": "int8"}))
    report = build_kb(release, tmp_path / "a", format="jsonl", encoder=str(tiny_encoder_dir), progress=False, reuse=kb_dir)
    assert report["entities_encoded"] == 5 and "reused_from" not in report
    assert "precision int8" in report["resume"]["reuse"]["not_reused_because"]
    (kb_dir / "stamp.json").write_text(json.dumps(stamp))
    other = BiEncoder.from_pretrained(str(other_tiny_bert))
    other.save(tmp_path / "other")
    report = build_kb(release, tmp_path / "b", format="jsonl", encoder=str(tmp_path / "other"), progress=False, reuse=kb_dir)
    assert report["entities_encoded"] == 5 and "another entity encoder" in report["resume"]["reuse"]["not_reused_because"]


def test_an_interrupted_update_resumes_and_never_mixes_with_a_full_build(tmp_path, kb_dir, release, tiny_encoder_dir,
                                                                         monkeypatch):
    out = tmp_path / "update"
    original = chunks.save_chunk

    def save_once_then_stop(work, n, first, vectors):
        original(work, n, first, vectors)
        raise KeyboardInterrupt

    monkeypatch.setattr(chunks, "save_chunk", save_once_then_stop)
    with pytest.raises(KeyboardInterrupt):
        build_kb(release, out, format="jsonl", encoder=str(tiny_encoder_dir), progress=False, reuse=kb_dir, chunk_size=1)
    monkeypatch.setattr(chunks, "save_chunk", original)
    seen = recording(monkeypatch)
    report = build_kb(release, out, format="jsonl", encoder=str(tiny_encoder_dir), progress=False, reuse=kb_dir,
                      chunk_size=1)
    assert report["resume"]["reused_entities"] == 1 and report["entities_encoded"] == 1 and len(seen) == 1
    # the same work folder under a full build of the release: its stamp differs, so it starts clean
    monkeypatch.setattr(chunks, "save_chunk", save_once_then_stop)
    with pytest.raises(KeyboardInterrupt):
        build_kb(release, out, format="jsonl", encoder=str(tiny_encoder_dir), progress=False, reuse=kb_dir,
                 chunk_size=1, force=True)
    monkeypatch.setattr(chunks, "save_chunk", original)
    full = build_kb(release, out, format="jsonl", encoder=str(tiny_encoder_dir), progress=False, chunk_size=1, force=True)
    assert full["resume"]["restarted"] and full["resume"]["reused_entities"] == 0 and full["entities_encoded"] == 5


def test_name_rows_update_encodes_only_new_names(tmp_path, kb_dir, release, tiny_encoder_dir):
    build_names(kb_dir, progress=False)
    new_kb = tmp_path / "new_kb"
    build_kb(release, new_kb, format="jsonl", encoder=str(tiny_encoder_dir), progress=False, reuse=kb_dir)
    ref = build_names(new_kb, tmp_path / "ref", progress=False)
    report = build_names(new_kb, tmp_path / "upd", progress=False, reuse=kb_dir / "names")
    # heparin and unfractionated heparin are new; every other name is spelled as before
    assert report["names_encoded"] == 2 and report["resume"]["reuse"]["reused"] == ref["names"] - 2
    a, b = NameIndex.from_disk(tmp_path / "ref"), NameIndex.from_disk(tmp_path / "upd")
    assert a.names == b.names
    np.testing.assert_array_equal(a.entity_rows, b.entity_rows)
    np.testing.assert_allclose(a.name_vectors(np.arange(len(a))).numpy(), b.name_vectors(np.arange(len(b))).numpy(),
                               atol=2e-3)
    # another input kind is not reused (a name alone is not a name with types)
    other = build_names(new_kb, tmp_path / "types", input="name_types", progress=False, reuse=kb_dir / "names")
    assert other["names_encoded"] == other["names"] and "input" in other["resume"]["reuse"]["not_reused_because"]


def test_cli_refuses_a_reuse_folder_that_is_not_one(tmp_path, kb_dir, release):
    runner = CliRunner()
    result = runner.invoke(app, ["build-kb", "--kb", str(release), "-o", str(tmp_path / "x"), "--reuse", str(tmp_path)])
    assert result.exit_code != 0 and "is not a KB folder" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["build-names", str(kb_dir), "--reuse", str(tmp_path)])
    assert result.exit_code != 0 and "is not a name index folder" in result.output
