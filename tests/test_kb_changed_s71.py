"""A saved pipeline warns when the KB folder it was saved from has changed, also when only a synonym
moved between entities (same entity count, same file sizes)."""
import json
import warnings

import pytest
import spacy

from spacy_pel.retrieval.build import build_kb


def write_release(path, rows):
    path.write_text("".join(json.dumps({"id": i, "name": n, "aliases": a}) + "\n" for i, n, a in rows), encoding="utf8")


def test_a_kb_folder_rebuilt_with_a_moved_synonym_is_named_as_changed(tmp_path, tiny_encoder_dir, monkeypatch):
    """Defect: the check compared entity counts, encoders and file sizes; a rebuild where a synonym moved
    to another entity has all three equal, so the pipeline linked against its old copy without a word."""
    write_release(tmp_path / "v1.jsonl", [("D1", "lithium carbonate", ["heart block"]), ("D2", "atrial flutter", [])])
    write_release(tmp_path / "v2.jsonl", [("D1", "lithium carbonate", []), ("D2", "atrial flutter", ["heart block"])])
    monkeypatch.chdir(tmp_path)
    build_kb(tmp_path / "v1.jsonl", tmp_path / "kb", encoder=str(tiny_encoder_dir), progress=False)
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": "kb", "threshold": 0.0})
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipe")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the folder unchanged: no warning
        spacy.load(tmp_path / "pipe")
    build_kb(tmp_path / "v2.jsonl", tmp_path / "kb", encoder=str(tiny_encoder_dir), progress=False, force=True)
    with pytest.warns(UserWarning, match=r"changed since \(other entities, names or synonyms\).*retarget"):
        spacy.load(tmp_path / "pipe", config={"components.pel_linker.kb": "kb"})
