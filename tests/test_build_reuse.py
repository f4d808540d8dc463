"""``build-kb --reuse``: the workflow's final KB is the pre-training KB, copied, when the entity tower
did not change, and is encoded anew when it did (another fingerprint); other input is built, not copied."""
import json

import numpy as np
import pytest
import torch

from spacy_pel.files import InputError
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.index import EntityIndex

from .conftest import KB_LINES


def test_same_encoder_and_input_is_copied_not_encoded(tmp_path, kb_file, kb_dir, tiny_encoder_dir, monkeypatch):
    def no_encoding(*a, **k):
        raise AssertionError("reuse must not encode")

    monkeypatch.setattr(BiEncoder, "encode_entities", no_encoding)
    out = tmp_path / "final"
    report = build_kb(kb_file, out, format="jsonl", encoder=str(tiny_encoder_dir), progress=False, reuse=kb_dir)
    assert report["reused_from"] == str(kb_dir) and report["entities_encoded"] == 0
    a, b = EntityIndex.from_disk(kb_dir), EntityIndex.from_disk(out)
    np.testing.assert_array_equal(a.embeddings, b.embeddings)
    assert a.fingerprint == b.fingerprint and [e.id for e in a.entities] == [e.id for e in b.entities]


def test_a_changed_entity_tower_encodes_anew(tmp_path, kb_file, kb_dir, tiny_encoder_dir):
    """A trained entity tower has another fingerprint: its KB is encoded, not copied from the old one."""
    trained = BiEncoder.from_pretrained(str(tiny_encoder_dir))
    with torch.no_grad():
        for p in trained.entity_model.parameters():
            p.add_(0.05)
    trained.save(tmp_path / "trained")
    out = tmp_path / "final"
    report = build_kb(kb_file, out, format="jsonl", encoder=str(tmp_path / "trained"), progress=False, reuse=kb_dir)
    assert "reused_from" not in report and report["entities_encoded"] == len(KB_LINES)
    new = EntityIndex.from_disk(out)
    assert new.fingerprint != EntityIndex.from_disk(kb_dir).fingerprint
    new.check_encoder(BiEncoder.from_pretrained(str(tmp_path / "trained")))


def test_a_changed_kb_file_is_not_copied(tmp_path, kb_dir, tiny_encoder_dir):
    """Another KB file is not the earlier KB: it is built, its unchanged entities taking the earlier vectors
    (tests/test_kb_update.py) and its changed one encoded."""
    other = tmp_path / "other.jsonl"
    changed = json.dumps({"id": "D3", "name": "atrial flutter", "types": ["Disease"]})
    other.write_text("\n".join([*KB_LINES[:2], changed]) + "\n", encoding="utf8")
    report = build_kb(other, tmp_path / "final", format="jsonl", encoder=str(tiny_encoder_dir), progress=False,
                      reuse=kb_dir)
    assert "copy_s" not in report and report["entities_total"] == 3
    assert report["entities_encoded"] == 1 and report["entities_reused"] == 2


def test_reuse_into_itself_or_with_add_is_refused(tmp_path, kb_file, kb_dir, tiny_encoder_dir):
    with pytest.raises(InputError, match="output folder itself"):
        build_kb(kb_file, kb_dir, format="jsonl", encoder=str(tiny_encoder_dir), progress=False, reuse=kb_dir)
    with pytest.raises(InputError, match="--add"):
        build_kb(None, kb_dir, format="jsonl", encoder=str(tiny_encoder_dir), add=kb_file, progress=False,
                 reuse=tmp_path / "x")


def test_a_kb_extended_with_add_is_not_copied_but_its_rows_are_reused(tmp_path, kb_file, kb_dir, tiny_encoder_dir):
    extra = tmp_path / "extra.jsonl"
    extra.write_text(json.dumps({"id": "D9", "name": "heparin", "types": ["Chemical"]}) + "\n", encoding="utf8")
    build_kb(None, kb_dir, format="jsonl", encoder=str(tiny_encoder_dir), add=extra, progress=False)
    report = build_kb(kb_file, tmp_path / "final", format="jsonl", encoder=str(tiny_encoder_dir), progress=False,
                      reuse=kb_dir)
    # not a copy (the grown KB holds D9, which kb_file lacks), but the vectors of the rows it shares are taken
    assert "copy_s" not in report and report["entities_total"] == len(KB_LINES)
    assert report["entities_reused"] == len(KB_LINES) and report["entities_encoded"] == 0
