"""A saved pipeline's parts named by the path they were saved from: their source is hashed on load only when
the file system says it may have changed (its size or time differs from the save's record)."""
import json
import os
import warnings

import spacy

from spacy_pel.pipeline import folder
from tests.test_shipped_s74 import linker_nlp

SOURCE = "training/aliases.json"
CONFIG = {"paths": {}, "components": {"pel_linker": {"rules": {"aliases": {"aliases": SOURCE}}}}}


def saved(kb_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "training").mkdir()
    (tmp_path / SOURCE).write_text(json.dumps({"aspirin": {"D4": 2}}), encoding="utf8")
    linker_nlp(kb_dir, SOURCE).to_disk(tmp_path / "pipe")
    return tmp_path / "pipe"


def load_counting_hashes(path, monkeypatch):
    calls = []
    real = folder.source_digest
    monkeypatch.setattr(folder, "source_digest", lambda source: calls.append(source) or real(source))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spacy.load(path, config=CONFIG)
    return calls, [str(w.message) for w in caught if "other content" in str(w.message)]


def test_an_unchanged_source_is_not_read_on_load(kb_dir, tmp_path, monkeypatch):
    """Defect: every load hashed the whole source (a re-ranker folder: ~1 s a GB) to find it unchanged."""
    pipe = saved(kb_dir, tmp_path, monkeypatch)
    calls, changed = load_counting_hashes(pipe, monkeypatch)
    assert calls == [] and changed == []


def test_a_touched_source_is_hashed_and_only_other_content_warned_about(kb_dir, tmp_path, monkeypatch):
    pipe = saved(kb_dir, tmp_path, monkeypatch)
    stat = (tmp_path / SOURCE).stat()
    os.utime(tmp_path / SOURCE, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # same content, newer time
    calls, changed = load_counting_hashes(pipe, monkeypatch)
    assert calls == [SOURCE] and changed == []
    (tmp_path / SOURCE).write_text(json.dumps({"aspirin": {"D5": 2}}), encoding="utf8")  # same size, other content
    calls, changed = load_counting_hashes(pipe, monkeypatch)
    assert calls == [SOURCE] and len(changed) == 1


def test_a_save_without_the_stat_record_still_compares_contents(kb_dir, tmp_path, monkeypatch):
    """A pipeline saved before the record (session 74): hashed on every load, as then."""
    pipe = saved(kb_dir, tmp_path, monkeypatch)
    sources = pipe / "pel_linker" / "sources.json"
    record = json.loads(sources.read_text(encoding="utf8"))
    record.pop(folder.STATS_KEY)
    sources.write_text(json.dumps(record), encoding="utf8")
    (tmp_path / SOURCE).write_text(json.dumps({"aspirin": {"D5": 2}}), encoding="utf8")
    calls, changed = load_counting_hashes(pipe, monkeypatch)
    assert calls == [SOURCE] and len(changed) == 1
