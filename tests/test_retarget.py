"""``python -m spacy_pel retarget``: a trained pipeline linking against another KB."""
import shutil

import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.files import InputError
from spacy_pel.pipeline.linker import find_linker
from spacy_pel.pipeline.retarget import retarget
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.retrieval.names import EncoderMismatchError, build_names

OTHER_KB = [
    '{"id": "H1", "name": "heart failure", "aliases": ["cardiac failure"], "types": ["Disease"]}',
    '{"id": "H2", "name": "hypertension", "aliases": ["high blood pressure"], "types": ["Disease"]}',
    '{"id": "H3", "name": "metformin", "types": ["Chemical"]}',
]


@pytest.fixture
def saved_pipeline(kb_dir, tmp_path):
    """A pipeline over the conftest KB with the alias table and the name-rows rule, saved."""
    names = tmp_path / "names"
    build_names(kb_dir, names, progress=False)
    rules = {"aliases": {"@misc": "spacy_pel.rules.alias_table.v1"},
             "names": {"@misc": "spacy_pel.rules.name_rows.v1", "names": str(names), "mode": "names"}}
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "rules": rules, "top_k": 3})
    find_linker(nlp)[1].ensure_loaded()
    nlp.to_disk(tmp_path / "pipeline")
    return tmp_path / "pipeline"


@pytest.fixture
def other_kb(tmp_path, other_tiny_bert):
    """Another KB, encoded by another encoder (as an encoder adapted on it would be), and its name rows."""
    from spacy_pel.models.encoder import BiEncoder

    encoder = tmp_path / "other_encoder"
    BiEncoder.from_pretrained(str(other_tiny_bert)).save(encoder)
    (tmp_path / "other.jsonl").write_text("\n".join(OTHER_KB) + "\n", encoding="utf8")
    kb = tmp_path / "other_kb"
    build_kb(tmp_path / "other.jsonl", kb, format="jsonl", encoder=str(encoder), progress=False)
    build_names(kb, tmp_path / "other_names", progress=False)
    return kb, tmp_path / "other_names", encoder


def link(nlp, text, spans):
    doc = nlp.make_doc(text)
    doc.ents = [Span(doc, a, b, label="Disease") for a, b in spans]
    return [e.kb_id_ for e in nlp(doc).ents]


def test_the_retargeted_pipeline_links_the_new_kb_and_holds_it(saved_pipeline, other_kb, tmp_path, monkeypatch):
    kb, names, encoder = other_kb
    retarget(saved_pipeline, kb, tmp_path / "out", names)
    shutil.move(str(kb), tmp_path / "gone_kb")  # the written pipeline holds its KB, encoder and name rows
    shutil.move(str(names), tmp_path / "gone_names")
    shutil.move(str(encoder), tmp_path / "gone_encoder")
    monkeypatch.chdir(tmp_path.parent)
    nlp = spacy.load(tmp_path / "out")
    linker = find_linker(nlp)[1]
    linker.ensure_loaded()
    assert list(linker.index.entities.ids) == ["H1", "H2", "H3"]
    assert linker.encoder.fingerprint() == EntityIndex.from_disk(tmp_path / "gone_kb").fingerprint
    assert set(nlp.config["components"]["pel_linker"]["rules"]) == {"aliases", "names"}  # the rules kept
    # KB names decide: the alias table of the new KB's names, the name rows of its synonyms
    assert link(nlp, "cardiac failure and hypertension", [(0, 2), (3, 4)]) == ["H1", "H2"]


def test_refused_without_name_rows_or_with_rows_of_another_encoder(saved_pipeline, other_kb, kb_dir, tmp_path):
    kb, names, _ = other_kb
    with pytest.raises(InputError, match="build-names"):
        retarget(saved_pipeline, kb, tmp_path / "out", None)
    with pytest.raises(EncoderMismatchError):  # the first KB's name rows: another entity tower
        retarget(saved_pipeline, kb, tmp_path / "out", tmp_path / "names")
    # name rows of the same entity tower, but of another KB (two of its three records): one line, not a traceback
    (tmp_path / "part.jsonl").write_text("\n".join(OTHER_KB[:2]) + "\n", encoding="utf8")
    build_kb(tmp_path / "part.jsonl", tmp_path / "part_kb", format="jsonl", encoder=str(other_kb[2]), progress=False)
    build_names(tmp_path / "part_kb", tmp_path / "part_names", progress=False)
    with pytest.raises(InputError, match="another KB"):
        retarget(saved_pipeline, kb, tmp_path / "out", tmp_path / "part_names")
    result = CliRunner().invoke(app, ["retarget", str(saved_pipeline), "--kb", str(kb), "--names", str(tmp_path / "part_names"),
                                      "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and "another KB" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # nothing half-written
    result = CliRunner().invoke(app, ["retarget", str(saved_pipeline), "--kb", str(kb), "-o", str(tmp_path / "out")])
    assert result.exit_code != 0 and "build-names" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(app, ["retarget", str(saved_pipeline), "--kb", str(kb), "--names", str(names),
                                      "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "config.cfg").exists()


def test_a_new_release_of_the_kb_keeps_the_pipelines_trained_encoder(tmp_path, kb_dir, tiny_encoder_dir):
    """The workflow's KB names the base model its frozen entity tower came from (``encoder_source``); the
    pipeline's mention tower is the trained one. A new release encoded by that entity tower must keep the
    pipeline's encoder, not load the base model's towers from the KB's meta.json."""
    import torch

    from spacy_pel.models.encoder import BiEncoder

    trained = BiEncoder.from_pretrained(str(tiny_encoder_dir))
    with torch.no_grad():
        for p in trained.mention_model.parameters():
            p.add_(0.05)
    trained.save(tmp_path / "trained")
    assert trained.fingerprint() == EntityIndex.from_disk(kb_dir).fingerprint  # the entity tower is the base one
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "encoder": str(tmp_path / "trained")})
    find_linker(nlp)[1].ensure_loaded()
    nlp.to_disk(tmp_path / "pipeline")
    (tmp_path / "release.jsonl").write_text("\n".join(OTHER_KB) + "\n", encoding="utf8")
    build_kb(tmp_path / "release.jsonl", tmp_path / "release_kb", format="jsonl", encoder=str(tiny_encoder_dir),
             progress=False)
    assert EntityIndex.read_meta(tmp_path / "release_kb")["encoder_source"] == str(tiny_encoder_dir)
    _, overrides = retarget(tmp_path / "pipeline", tmp_path / "release_kb", tmp_path / "out")
    assert not any(k.endswith(".encoder") for k in overrides)
    linker = find_linker(spacy.load(tmp_path / "out"))[1]
    linker.ensure_loaded()
    assert list(linker.index.entities.ids) == ["H1", "H2", "H3"]
    for mine, theirs in zip(linker.encoder.mention_model.parameters(), trained.mention_model.parameters()):
        assert torch.equal(mine, theirs)
    result = CliRunner().invoke(app, ["retarget", str(tmp_path / "pipeline"), "--kb", str(tmp_path / "release_kb"),
                                      "-o", str(tmp_path / "out_cli")])
    assert result.exit_code == 0 and "own encoder kept" in result.output, result.output


def test_labels_whose_types_the_new_kb_lacks_are_named(tmp_path, kb_dir, other_kb):
    """BC5CDR's map over an ontology with other types (HPO): the rule and the NIL classifier cannot use it there."""
    from spacy_pel.pipeline.retarget import labels_without_kb_types

    kb, _, _ = other_kb
    rules = {"label_types": {"@misc": "spacy_pel.rules.label_types.v1",
                             "label_types": {"Disease": ["Diseases"], "Chemical": ["Chemical"]}}}
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "rules": rules})
    find_linker(nlp)[1].ensure_loaded()
    assert labels_without_kb_types(nlp) == {"Disease": ["Diseases"]}  # the conftest KB's type is Disease
    nlp.to_disk(tmp_path / "pipeline")
    result = CliRunner().invoke(app, ["retarget", str(tmp_path / "pipeline"), "--kb", str(kb), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "Disease → Diseases" in result.output and "Chemical →" not in result.output
    retargeted = spacy.load(tmp_path / "out")
    assert labels_without_kb_types(retargeted) == {"Disease": ["Diseases"]}


def test_entities_added_to_a_kb_reach_a_saved_pipeline_without_retraining(saved_pipeline, kb_dir, tmp_path):
    """docs/kb-formats.md's recipe: build-kb --add, build-names --reuse (only the new names encoded),
    retarget. The saved pipeline holds the old KB and name rows, which refuse the grown KB by name."""
    kb = tmp_path / "grown_kb"
    shutil.copytree(kb_dir, kb)
    (tmp_path / "new.jsonl").write_text('{"id": "N1", "name": "zorbatinib", "aliases": ["ZRB-12"], "types": ["Chemical"]}\n',
                                        encoding="utf8")
    runner = CliRunner()
    result = runner.invoke(app, ["build-kb", "--add", str(tmp_path / "new.jsonl"), "--format", "jsonl", "--output", str(kb)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["build-names", str(kb), "--output", str(tmp_path / "grown_names"),
                                 "--reuse", str(tmp_path / "names")])
    assert result.exit_code == 0, result.output
    assert '"encoded": 2' in result.output  # the new entity's two names; every earlier name row reused
    stale = runner.invoke(app, ["retarget", str(saved_pipeline), "--kb", str(kb), "--names", str(tmp_path / "names"),
                                "-o", str(tmp_path / "stale")])
    assert stale.exit_code == 2 and "build-names" in stale.output, stale.output
    result = runner.invoke(app, ["retarget", str(saved_pipeline), "--kb", str(kb), "--names", str(tmp_path / "grown_names"),
                                 "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    nlp = spacy.load(tmp_path / "out")
    doc = nlp.make_doc("Zorbatinib ( ZRB-12 ) was given .")
    doc.ents = [Span(doc, 0, 1, label="Chemical"), Span(doc, 2, 3, label="Chemical")]
    assert [e.kb_id_ for e in nlp(doc).ents] == ["N1", "N1"]
    assert [e.kb_id_ for e in spacy.load(saved_pipeline)(doc).ents] != ["N1", "N1"]  # the saved one never had it


def _error_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [ln for ln in result.stderr.strip().splitlines() if not ln.startswith("warning: ")]  # spacy.load's
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_an_output_that_is_no_pipeline_is_refused(saved_pipeline, other_kb, tmp_path):
    """Defect: retarget -o P wiped a folder P (a user's thesis.txt gone) and replaced a file P by a folder
    (the file kept hidden as .P.old-PID)."""
    kb, names, _ = other_kb
    runner = CliRunner()

    def run(output):
        return runner.invoke(app, ["retarget", str(saved_pipeline), "--kb", str(kb), "--names", str(names), "-o", str(output)])

    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "thesis.txt").write_text("data", encoding="utf8")
    assert f"output {folder} is a folder that is not a pipeline" in _error_line(run(folder))
    assert [p.name for p in folder.iterdir()] == ["thesis.txt"]
    afile = tmp_path / "f.txt"
    afile.write_text("x", encoding="utf8")
    assert f"output {afile} is a file" in _error_line(run(afile))
    assert afile.read_text(encoding="utf8") == "x" and not list(tmp_path.glob(".f.txt*"))
    assert "is a folder that is not a pipeline" in _error_line(run(kb))  # a KB folder (its meta.json) is none
    assert EntityIndex.from_disk(kb).entities.ids[0] == "H1"
    with pytest.raises(InputError, match="not a pipeline"):
        retarget(saved_pipeline, kb, folder, names)
    assert run(tmp_path / "out").exit_code == 0 and run(tmp_path / "out").exit_code == 0  # a pipeline is replaced


def test_a_damaged_kb_is_one_line(saved_pipeline, other_kb, tmp_path):
    kb, names, _ = other_kb
    (kb / "embeddings.npy").write_bytes(b"\x80\x04garbage")
    result = CliRunner().invoke(app, ["retarget", str(saved_pipeline), "--kb", str(kb), "--names", str(names),
                                      "-o", str(tmp_path / "out")])
    assert f"KB folder {kb} is damaged: embeddings.npy is not a readable array" in _error_line(result)
    assert not (tmp_path / "out").exists()
