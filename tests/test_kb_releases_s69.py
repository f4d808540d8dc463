"""A corpus annotated against an older release of the KB — alternative ids (OBO ``alt_id``, an obsolete
term's ``replaced_by``, MEDIC's AltDiseaseIDs) — is linked and measured by every command as ``evaluate``
does: the ids resolve to their entity."""
import json
import re
import shutil
import warnings

import pytest
import spacy
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.kb import KBFormatError, read_kb
from spacy_pel.pipeline.linker import find_linker
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.names import build_names

OBO = """format-version: 1.2
default-namespace: human_phenotype

[Term]
id: HP:0000002
name: abnormality of body height
alt_id: HP:0000003

[Term]
id: HP:0000010
name: obsolete recurrent infection
is_obsolete: true
replaced_by: HP:0000020

[Term]
id: HP:0000020
name: recurrent infections

[Term]
id: HP:0000030
name: seizure
"""
TEXT = "Short stature and recurrent infection and a rash."
PUBTATOR = (f"1|t|{TEXT}\n1|a|\n1\t0\t13\tShort stature\tPhenotype\tHP:0000003\n"
            "1\t18\t37\trecurrent infection\tPhenotype\tHP:0000010\n1\t44\t48\trash\tPhenotype\t-1\n\n")


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_calibrate_takes_a_corpus_of_alternative_ids(tmp_path, tiny_encoder_dir):
    """Before, calibrate counted only primary ids as linkable and refused this corpus ("none of its gold
    mentions has an id in the KB") while evaluate measured it."""
    (tmp_path / "hp.obo").write_text(OBO, encoding="utf8")
    build_kb(tmp_path / "hp.obo", tmp_path / "kb", format="obo", encoder=str(tiny_encoder_dir), progress=False)
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(tmp_path / "kb"), "top_k": 3, "precision": "fp32"})
    find_linker(nlp)[1].ensure_loaded()
    nlp.to_disk(tmp_path / "pipe")
    (tmp_path / "c.pubtator").write_text(PUBTATOR, encoding="utf8")
    assert run("convert", tmp_path / "c.pubtator", tmp_path / "c.spacy").exit_code == 0
    result = run("evaluate", tmp_path / "c.spacy", "--pipeline", tmp_path / "pipe", "--output", tmp_path / "m.json")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "m.json").read_text())["counts"]["in_kb"] == 2
    result = run("calibrate", tmp_path / "pipe", tmp_path / "c.spacy", "-o", tmp_path / "cal")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cal" / "config.cfg").is_file()


def test_alternative_ids_in_a_table_or_a_json_string_are_ids_not_letters(tmp_path):
    """``alt_ids`` as a table's column (ids joined by |) or a JSON string: before, iterated letter by letter,
    every character an alternative id ("O", "1", "|") and the real old id resolving to nothing."""
    (tmp_path / "kb.csv").write_text("id,name,alt_ids\nX:1,lithium carbonate,OLD1| OLD2\nX:2,aspirin,\n", encoding="utf8")
    entities = read_kb(tmp_path / "kb.csv", "csv")
    assert entities[0].extra["alt_ids"] == ["OLD1", "OLD2"] and "alt_ids" not in entities[1].extra
    (tmp_path / "kb.jsonl").write_text('{"id": "X:1", "name": "lithium", "extra": {"alt_ids": "OLD1"}}\n', encoding="utf8")
    assert read_kb(tmp_path / "kb.jsonl", "jsonl")[0].extra["alt_ids"] == ["OLD1"]
    for bad, fragment in (('[7, null]', "must be a list of ids"), ('["-1"]', "alternative id '-1'"),
                          ('["A,B"]', "alternative id 'A,B'")):
        (tmp_path / "bad.jsonl").write_text('{"id": "X:1", "name": "a"}\n{"id": "X:2", "name": "b", "extra": {"alt_ids": %s}}\n'
                                            % bad, encoding="utf8")
        with pytest.raises(KBFormatError, match=f"bad.jsonl:2: .*{re.escape(fragment)}"):
            read_kb(tmp_path / "bad.jsonl", "jsonl")


def test_obo_escapes_are_read_and_obo_1_2_synonym_tags_kept(tmp_path):
    """Before, only \\" was unescaped (a name kept \\! and \\\\ as typed, a def its \\n), and 1.2's
    exact_synonym / related_synonym / narrow_synonym / broad_synonym lines were dropped without a word."""

    text = ('format-version: 1.2\n\n[Term]\nid: X:1\nname: Hello\\! world\n'
            'synonym: "C:\\\\drive" EXACT []\nsynonym: "quoted \\"word\\"" RELATED []\n'
            'def: "First line.\\nSecond\\Wline ! bang." []\n\n[Term]\nid: X:2\nname: 2\\,3-dimethyl\\: butane\n'
            'exact_synonym: "NIDDM" []\nrelated_synonym: "adult-onset diabetes" []\nnarrow_synonym: "MODY" []\n'
            'broad_synonym: "diabetes" []\n')
    (tmp_path / "t.obo").write_text(text, encoding="utf8")
    first, second = read_kb(tmp_path / "t.obo", "obo")
    assert (first.name, first.aliases, first.description) == (
        "Hello! world", ["C:\\drive", 'quoted "word"'], "First line.\nSecond line ! bang.")
    assert second.name == "2,3-dimethyl: butane"
    assert second.aliases == ["NIDDM", "adult-onset diabetes", "MODY", "diabetes"]


def test_a_table_header_naming_the_name_column_label_is_a_header(tmp_path):
    """``ID,Label,Synonyms`` (ontology and spreadsheet exports): before, taken for a header-less table, the
    header became an entity and the synonyms every entity's description. A header naming known columns but no
    id or no name column is refused, not read as an entity."""
    (tmp_path / "kb.csv").write_text("ID,Label,Synonyms\nX:1,acetylsalicylic acid,aspirin|ASA\nX:2,warfarin,coumadin\n",
                                     encoding="utf8")
    assert [(e.id, e.name, e.aliases, e.description) for e in read_kb(tmp_path / "kb.csv", "csv")] == [
        ("X:1", "acetylsalicylic acid", ["aspirin", "ASA"], ""), ("X:2", "warfarin", ["coumadin"], "")]
    (tmp_path / "odd.csv").write_text("code,title,synonyms\nX:1,aspirin,ASA\n", encoding="utf8")
    with pytest.raises(KBFormatError, match=r"odd\.csv:1: a header line \(code, title, synonyms\) without an id and a name"):
        read_kb(tmp_path / "odd.csv", "csv")


def test_a_reused_kb_records_the_encoder_it_was_built_with_and_add_reports_the_one_used(tmp_path, tiny_encoder_dir, kb_file):
    """``build-kb --encoder TRAINED --reuse EARLIER`` (the entity tower unchanged: the KB is copied) recorded
    EARLIER's encoder_source, so a linker given only the KB ran the base model's mention tower; ``--add``
    reported the --encoder option's default, not the KB's own encoder it encoded with."""
    trained = tmp_path / "retriever_best"  # only the mention tower trained: the same entity fingerprint
    shutil.copytree(tiny_encoder_dir, trained)
    weights = load_file(trained / "mention" / "model.safetensors")
    save_file({k: v + 0.05 if v.dtype.is_floating_point else v for k, v in weights.items()},
              trained / "mention" / "model.safetensors")
    build_kb(kb_file, tmp_path / "kb", encoder=str(tiny_encoder_dir), progress=False)
    report = build_kb(kb_file, tmp_path / "kb_final", encoder=str(trained), progress=False, reuse=tmp_path / "kb")
    assert report["entities_encoded"] == 0  # copied
    meta = lambda kb: json.loads((tmp_path / kb / "meta.json").read_text())  # noqa: E731
    assert meta("kb_final")["encoder_source"] == str(trained) and meta("kb")["encoder_source"] == str(tiny_encoder_dir)
    (tmp_path / "new.jsonl").write_text('{"id": "D9", "name": "heparin"}\n', encoding="utf8")
    result = run("build-kb", "--add", tmp_path / "new.jsonl", "-o", tmp_path / "kb")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "kb" / "build_report.json").read_text())["encoder"] == str(tiny_encoder_dir)


def test_add_to_a_compressed_kb_is_one_line_before_the_encoder_loads(kb_dir, tmp_path, monkeypatch):
    """``build-kb --add`` on an ``--index ivfpq`` KB loaded the encoder, encoded the new entities, then ended
    in a traceback (RefinedSearch.add's ValueError)."""
    import spacy_pel.retrieval.build as build

    real = build.EntityIndex.from_disk

    class Compressed:  # the KB as an ivfpq one loads (building one takes 10,000 entities)
        @staticmethod
        def from_disk(path, *args, **kwargs):
            index = real(path, *args, **kwargs)
            index.kind = "ivfpq"
            return index

    monkeypatch.setattr(build, "EntityIndex", Compressed)
    monkeypatch.setattr(build, "load_encoder", lambda *a, **k: pytest.fail("the encoder was loaded"))
    (tmp_path / "new.jsonl").write_text('{"id": "D9", "name": "heparin"}\n', encoding="utf8")
    result = run("build-kb", "--add", tmp_path / "new.jsonl", "-o", kb_dir)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "is a compressed (ivfpq) KB, which cannot be extended in place" in result.stderr


def test_add_extends_an_hnsw_kb(kb_file, tiny_encoder_dir, tmp_path):
    build_kb(kb_file, tmp_path / "kb", encoder=str(tiny_encoder_dir), index="hnsw", progress=False)
    (tmp_path / "new.jsonl").write_text('{"id": "D9", "name": "heparin"}\n', encoding="utf8")
    result = run("build-kb", "--add", tmp_path / "new.jsonl", "-o", tmp_path / "kb")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "kb" / "meta.json").read_text())["entities"] == 6


def test_a_pipeline_whose_kb_folder_has_grown_says_it_links_against_its_own_copy(kb_dir, tmp_path, monkeypatch):
    """Defect: after `build-kb --add` grew the KB folder a pipeline was saved from, spacy.load(config={kb:
    that path}) linked against the pipeline's old copy without a word (the saved path names the copy)."""
    extra = tmp_path / "extra.jsonl"
    extra.write_text('{"id": "D9", "name": "heparin sodium"}\n', encoding="utf8")
    monkeypatch.chdir(kb_dir.parent)
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": kb_dir.name, "threshold": 0.0})
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipe")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the folder unchanged: no warning
        spacy.load(tmp_path / "pipe")
    assert run("build-kb", "--add", extra, "-o", kb_dir.name).exit_code == 0
    with pytest.warns(UserWarning, match=r"its own copy of KB .*\(5 entities\).* changed since \(6 entities\).*retarget"):
        loaded = spacy.load(tmp_path / "pipe", config={"components.pel_linker.kb": kb_dir.name})
    assert len(find_linker(loaded)[1].index) == 5  # the copy, as documented


def test_name_rows_of_a_release_with_the_same_ids_but_a_moved_synonym_are_refused(tmp_path, tiny_encoder_dir):
    """Defect: a name index was checked against a KB by its ids alone: the last release's name rows were
    taken with a new one whose ids are the same but where a synonym moved to another entity."""
    releases = {"v1": [("D1", "lithium carbonate", ["heart block"]), ("D2", "atrial flutter", [])],
                "v2": [("D1", "lithium carbonate", []), ("D2", "atrial flutter", ["heart block"])]}
    for release, rows in releases.items():
        (tmp_path / f"{release}.jsonl").write_text("".join(
            json.dumps({"id": i, "name": n, "aliases": a}) + "\n" for i, n, a in rows), encoding="utf8")
        build_kb(tmp_path / f"{release}.jsonl", tmp_path / f"kb_{release}", encoder=str(tiny_encoder_dir), progress=False)
        build_names(tmp_path / f"kb_{release}", tmp_path / f"names_{release}", progress=False)

    def linker(names):
        nlp = spacy.blank("en")
        nlp.add_pipe("pel_linker", config={"kb": str(tmp_path / "kb_v2"), "rules": {
            "names": {"@misc": "spacy_pel.rules.name_rows.v1", "names": str(tmp_path / names), "mode": "names"}}})
        find_linker(nlp)[1].ensure_loaded()

    linker("names_v2")
    with pytest.raises(ValueError, match="another release of this KB"):
        linker("names_v1")
