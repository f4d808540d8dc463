"""A KB's releases: alias rows re-resolved through a new release's alternative ids, `--reuse` taking the
earlier KB's encoder, a KB grown with `--add` reused by the next release, alternative-id conflicts told."""
import json
import logging

import pytest
from typer.testing import CliRunner

import spacy_pel.retrieval.build as build
from spacy_pel.cli import app
from spacy_pel.files import InputError
from spacy_pel.kb import Entity, read_kb
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.pipeline.rules.alias_rows import AliasRowsRule, alias_name_index
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.chunks import STAMP_FILE
from spacy_pel.retrieval.index import EntityIndex

V1 = [{"id": "D1", "name": "lithium carbonate", "types": ["Chemical"]},
      {"id": "D4", "name": "aspirin", "types": ["Chemical"]},
      {"id": "D5", "name": "warfarin", "types": ["Chemical"]}]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf8")
    return path


def _kb(tmp_path, name, rows, encoder=None, **kw):
    out = tmp_path / name
    given = {} if encoder is None else {"encoder": str(encoder)}  # none: build_kb's default
    report = build_kb(_jsonl(tmp_path / f"{name}.jsonl", rows), out, format="jsonl", progress=False, **given, **kw)
    return out, report


def _pairs(names, index):
    return sorted((f, index.entities.ids[int(r)]) for f, r in zip(names.names, names.entity_rows))


# ---------------------------------------------------------------- bug 1: alias rows and alternative ids


def test_saved_alias_rows_are_resolved_again_when_a_release_changes_only_alternative_ids(tmp_path, tiny_encoder_dir):
    """Defect: a pipeline retargeted to a release with the same ids but C1 merged into D1 (an alt id) kept the
    alias rows of the last release: `lithium citrate` (annotated C1) had no row, while the alias table resolved it."""
    v2 = [{**V1[0], "extra": {"alt_ids": ["C1"]}}, *V1[1:]]
    kb1, _ = _kb(tmp_path, "kb1", V1, tiny_encoder_dir)
    kb2, _ = _kb(tmp_path, "kb2", v2, tiny_encoder_dir)
    (tmp_path / "aliases.json").write_text(json.dumps({"lithium citrate": {"C1": 3}, "coumadin": {"D5": 2}}))
    encoder = BiEncoder.from_pretrained(str(tiny_encoder_dir))
    index1, index2 = EntityIndex.from_disk(kb1), EntityIndex.from_disk(kb2)
    rule = AliasRowsRule(str(tmp_path / "aliases.json"))
    rule.setup(encoder, index1)
    assert _pairs(rule.names, index1) == [("coumadin", "D5")]
    rule.to_disk(tmp_path / "p")

    same = AliasRowsRule()
    same.from_disk(tmp_path / "p")
    saved = same.names
    same.setup(encoder, index1)
    assert same.names is saved  # the same KB: the saved vectors are kept, nothing encoded again

    retargeted = AliasRowsRule()
    retargeted.from_disk(tmp_path / "p")
    retargeted.setup(encoder, index2)
    fresh = alias_name_index(retargeted.counts, encoder, index2)
    assert _pairs(retargeted.names, index2) == _pairs(fresh, index2) == [("coumadin", "D5"), ("lithium citrate", "D1")]


# ---------------------------------------------------------------- bug 2: --reuse without --encoder


def test_reuse_without_an_encoder_encodes_with_the_earlier_kbs_encoder(tmp_path, tiny_encoder_dir, monkeypatch):
    """Defect: `build-kb --reuse EARLIER` without --encoder (the docs' recipe) encoded with all-MiniLM-L6-v2,
    not EARLIER's recorded encoder, and reused nothing."""
    kb1, _ = _kb(tmp_path, "kb1", V1, tiny_encoder_dir)
    loaded = []
    real = build.load_encoder

    def spy(source, *args, **kw):
        loaded.append(source)
        assert source == str(tiny_encoder_dir), f"loaded {source}, not the earlier KB's encoder"
        return real(source, *args, **kw)

    monkeypatch.setattr(build, "load_encoder", spy)
    kb2, report = _kb(tmp_path, "kb2", [*V1, {"id": "D9", "name": "ibuprofen"}], reuse=kb1)
    assert loaded == [str(tiny_encoder_dir)]
    assert report["encoder"] == str(tiny_encoder_dir) and report["resume"]["reuse"]["reused"] == 3
    assert EntityIndex.read_meta(kb2)["encoder_source"] == str(tiny_encoder_dir)


def test_reuse_that_takes_nothing_is_a_warning_on_stderr(tmp_path, tiny_encoder_dir, other_tiny_bert):
    kb1, _ = _kb(tmp_path, "kb1", V1, tiny_encoder_dir)
    result = CliRunner().invoke(app, ["build-kb", "--kb", str(_jsonl(tmp_path / "v2.jsonl", V1)), "-o", str(tmp_path / "kb2"),
                                      "--encoder", str(other_tiny_bert), "--reuse", str(kb1)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["resume"]["reuse"]["not_reused_because"] == "built by another entity encoder"
    warning = [ln for ln in result.stderr.splitlines() if "nothing reused" in ln]
    assert len(warning) == 1 and str(kb1) in warning[0] and "another entity encoder" in warning[0], result.stderr


# ---------------------------------------------------------------- bug 3: a grown KB as the --reuse source


def test_a_kb_grown_with_add_is_reused_by_the_next_release(tmp_path, tiny_encoder_dir):
    """Defect: a KB extended with `--add` reused nothing ("the added rows' precision is not recorded")."""
    kb, _ = _kb(tmp_path, "kb", V1, tiny_encoder_dir)
    build_kb(None, kb, format="jsonl", add=_jsonl(tmp_path / "new.jsonl", [{"id": "D9", "name": "ibuprofen"}]),
             progress=False)
    added = json.loads((kb / STAMP_FILE).read_text())["added"][0]
    assert added["entities"] == 1 and added["precision"] and added["entities_sha256"]
    v2 = [*V1, {"id": "D9", "name": "ibuprofen"}, {"id": "D10", "name": "heparin"}]
    _, report = _kb(tmp_path, "v2", v2, tiny_encoder_dir, reuse=kb)
    assert report["resume"]["reuse"] == {"from": str(kb), "reused": 4, "encoded": 1}
    grown, new = EntityIndex.from_disk(kb), EntityIndex.from_disk(tmp_path / "v2")
    assert (new.vectors([3]) == grown.vectors([3])).all()  # the added row's vector, taken as it was

    stamp = json.loads((kb / STAMP_FILE).read_text())  # a KB extended before the added rows' precision was recorded
    stamp["added"][0] = {k: stamp["added"][0][k] for k in ("kb", "format", "input_sha256")}
    (kb / STAMP_FILE).write_text(json.dumps(stamp))
    _, report = _kb(tmp_path, "v2b", v2, tiny_encoder_dir, reuse=kb)
    assert report["resume"]["reuse"]["reused"] == 0
    assert "before the added rows' texts and precision were recorded" in report["resume"]["reuse"]["not_reused_because"]


# ---------------------------------------------------------------- bug 4: alternative-id conflicts


def test_an_alternative_id_listed_by_two_entities_is_a_warning_naming_both_lines(tmp_path, caplog):
    """Defect: a release splitting D7 in two (both listing it as an alt id) was read without a word; D7 resolved
    to the first by file order."""
    path = _jsonl(tmp_path / "kb.jsonl", [{"id": "D1", "name": "lithium", "extra": {"alt_ids": ["C1"]}},
                                          {"id": "D7a", "name": "viral hepatitis", "extra": {"alt_ids": ["D7"]}},
                                          {"id": "D7b", "name": "toxic hepatitis", "extra": {"alt_ids": ["D7", "C9"]}}])
    with caplog.at_level(logging.WARNING, logger="spacy_pel"):
        entities = read_kb(path, "jsonl")
    assert [e.id for e in entities] == ["D1", "D7a", "D7b"]  # nothing left out
    warnings = [r.getMessage() for r in caplog.records if "alternative id" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "1 alternative id(s) listed by two entities" in warnings[0]
    assert f"D7 of D7a ({path}:2) and of D7b ({path}:3)" in warnings[0]


def test_add_refuses_an_id_that_is_an_alternative_id_of_the_kb(tmp_path, tiny_encoder_dir, monkeypatch, caplog):
    """Defect: `--add` of C1, an alt id of D1 (merged), was accepted: a corpus's C1 then meant the new entity."""
    kb, _ = _kb(tmp_path, "kb", [{**V1[0], "extra": {"alt_ids": ["C1"]}}, *V1[1:]], tiny_encoder_dir)
    real = build.load_encoder
    monkeypatch.setattr(build, "load_encoder", lambda *a, **k: pytest.fail("the encoder was loaded"))
    with pytest.raises(InputError, match=r"1 entity id\(s\) already in the KB .*C1 \(an alternative id of D1\)"):
        build_kb(None, kb, format="jsonl", add=_jsonl(tmp_path / "c1.jsonl", [{"id": "C1", "name": "lithium citrate"}]),
                 progress=False)
    monkeypatch.setattr(build, "load_encoder", real)
    index = EntityIndex.from_disk(kb)
    with pytest.raises(ValueError, match="already in the KB"):  # the library's EntityIndex.add too
        index.add([Entity("C1", "lithium citrate")], BiEncoder.from_pretrained(str(tiny_encoder_dir)))

    # an added entity's alternative id that already names an entity keeps naming it, and says so
    with caplog.at_level(logging.WARNING, logger="spacy_pel"):
        build_kb(None, kb, format="jsonl", progress=False,
                 add=_jsonl(tmp_path / "d9.jsonl", [{"id": "D9", "name": "lithium salt", "extra": {"alt_ids": ["C1", "D4"]}}]))
    assert "2 alternative id(s) of the added entities already name an entity of the KB" in caplog.text
    assert "C1 of D9 (D1)" in caplog.text and "D4 of D9 (D4)" in caplog.text
    assert EntityIndex.from_disk(kb).canonical("C1") == "D1"
