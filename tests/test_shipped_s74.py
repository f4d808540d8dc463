"""A saved (and so shipped) pipeline holds what its last save wrote, reads what the config asks for, and names
no folder of the machine it was saved on: a re-save drops the parts turned off since, files an earlier save left
are not read, a part's source changed since the save is warned about, and its KB finds the encoder saved beside it."""
import json
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import spacy
from weasel.cli.run import check_rerun, update_lockfile
from weasel.util import load_project_config

from spacy_pel.retrieval.encoder_record import RELATIVE_KEY
from spacy_pel.retrieval.index import EntityIndex
from tests.test_linker import make_doc

ALIASES = {"zorblax": {"D5": 3}}  # a training form no KB name holds
ROOT = Path(__file__).resolve().parents[1]


def linker_nlp(kb_dir, aliases=None):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "device": "cpu", "threshold": 0.0, "rules": {
        "aliases": {"@misc": "spacy_pel.rules.alias_table.v1", "aliases": aliases}}})
    nlp.initialize()
    return nlp


def zorblax(nlp):
    (ent,) = nlp(make_doc(nlp, "zorblax", [(0, 1, "Chemical")])).ents
    return ent.kb_id_


def load(path, **config):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return spacy.load(path, config=config)


def test_a_save_over_an_earlier_one_drops_the_alias_forms_turned_off_since(kb_dir, tmp_path):
    """Defect: the second save wrote no aliases.json but left the first one's, and spacy.load read it although the
    config says `aliases = null` (rule off): the dropped training form still decided `zorblax`."""
    (tmp_path / "aliases.json").write_text(json.dumps(ALIASES), encoding="utf8")
    linker_nlp(kb_dir, str(tmp_path / "aliases.json")).to_disk(tmp_path / "pipe")
    assert zorblax(load(tmp_path / "pipe")) == "D5"
    linker_nlp(kb_dir).to_disk(tmp_path / "pipe")
    assert not (tmp_path / "pipe" / "pel_linker" / "aliases.json").exists()
    nlp = load(tmp_path / "pipe")
    assert nlp.get_pipe("pel_linker").rules["aliases"].counts is None


def test_a_part_file_that_sources_json_does_not_list_is_not_read(kb_dir, tmp_path):
    """Defect: `wanted()` took a part's files when the configured source (None) equalled sources.json's entry for
    it, also None when the save wrote no such entry (files left by an earlier save, or put there by hand)."""
    linker_nlp(kb_dir).to_disk(tmp_path / "pipe")
    (tmp_path / "pipe" / "pel_linker" / "aliases.json").write_text(json.dumps(ALIASES), encoding="utf8")
    nlp = load(tmp_path / "pipe")
    assert nlp.get_pipe("pel_linker").rules["aliases"].counts is None


def test_a_part_source_spelled_as_saved_but_changed_here_is_warned_about(kb_dir, tmp_path, monkeypatch):
    """Defect: a config naming the part's source as the build machine typed it (relative) silently kept the
    saved copy, though the file there was another; the same file under another name was read."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "aliases.json").write_text(json.dumps({"aspirin": {"D4": 2}}), encoding="utf8")
    linker_nlp(kb_dir, "training/aliases.json").to_disk(tmp_path / "pipe")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # unchanged: no warning
        warnings.filterwarnings("ignore", message=".*NIL threshold")
        spacy.load(tmp_path / "pipe")
    (tmp_path / "training" / "aliases.json").write_text(json.dumps(ALIASES), encoding="utf8")
    with pytest.warns(UserWarning, match=r"rules\.aliases.*training/aliases\.json.*other content"):
        spacy.load(tmp_path / "pipe", config={"paths": {}, "components": {"pel_linker": {"rules": {"aliases": {
            "aliases": "training/aliases.json"}}}}})
    shutil.copy(tmp_path / "training" / "aliases.json", tmp_path / "mine.json")
    assert zorblax(load(tmp_path / "pipe", **{"components.pel_linker.rules.aliases.aliases": "mine.json"})) == "D5"


def test_the_kb_saved_in_a_pipeline_names_the_encoder_beside_it(kb_dir, tiny_encoder_dir, tmp_path):
    """Defect: pel_linker/kb/meta.json recorded the build machine's absolute encoder folder and a path relative
    to it, so once the build folders were gone, build-names or build-kb --reuse on the pipeline's KB failed."""
    linker_nlp(kb_dir).to_disk(tmp_path / "pipe")
    meta = json.loads((tmp_path / "pipe" / "pel_linker" / "kb" / "meta.json").read_text(encoding="utf8"))
    assert meta[RELATIVE_KEY] == "../encoder"
    assert str(tmp_path) not in json.dumps(meta) and str(tiny_encoder_dir) not in json.dumps(meta)
    sources = (tmp_path / "pipe" / "pel_linker" / "sources.json").read_text(encoding="utf8")
    assert str(tiny_encoder_dir) not in sources  # the encoder taken from the KB's meta.json: no config path to record
    shutil.move(tmp_path / "pipe", tmp_path / "shipped")
    index = EntityIndex.from_disk(tmp_path / "shipped" / "pel_linker" / "kb")
    assert index.encoder_source == str(tmp_path / "shipped" / "pel_linker" / "encoder")
    # saved again from where it was loaded (calibrate, retarget): still the encoder beside it
    load(tmp_path / "shipped").to_disk(tmp_path / "again")
    meta = json.loads((tmp_path / "again" / "pel_linker" / "kb" / "meta.json").read_text(encoding="utf8"))
    assert meta[RELATIVE_KEY] == "../encoder" and not meta["encoder_source"]


def package_step(project: Path):
    (command,) = [c for c in load_project_config(project)["commands"] if c["name"] == "package"]
    return command


def test_the_package_step_runs_again_when_spacy_pel_changed(tmp_path):
    """Defect: its deps were the pipeline and setup.py only, so after a change to spacy_pel's code
    `spacy project run package` said `nothing changed` and the shipped spacy_pel wheel kept the old code."""
    for name in ("project.yml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "spacy_pel", tmp_path / "spacy_pel", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "training" / "pipeline_calibrated").mkdir(parents=True)
    (tmp_path / "training" / "pipeline_calibrated" / "meta.json").write_text("{}", encoding="utf8")
    (tmp_path / "packages").mkdir()
    (tmp_path / "packages" / "x.whl").write_text("x", encoding="utf8")
    command = package_step(tmp_path)
    update_lockfile(tmp_path, command)
    assert not check_rerun(tmp_path, command)
    with (tmp_path / "spacy_pel" / "pipeline" / "linker.py").open("a", encoding="utf8") as f:
        f.write("# a fix\n")
    assert check_rerun(tmp_path, command)


def test_the_package_step_clears_the_pipeline_package_folder_before_spacy_package(tmp_path):
    """Defect: only the repository's build/ was removed; `spacy package --force` keeps the pipeline package's
    build/, whose build/lib setuptools reuses, so a second run shipped the earlier pipeline's files."""
    command = package_step(ROOT)
    script = command["script"]
    package = next(i for i, line in enumerate(script) if line.startswith("python -m spacy package"))
    argv = shlex.split(script[package])
    name, version = argv[argv.index("--name") + 1], argv[argv.index("--version") + 1]
    stale = tmp_path / "packages" / f"en_{name}-{version}" / "build" / "lib" / f"en_{name}"
    stale.mkdir(parents=True)
    (stale / "aliases.json").write_text("{}", encoding="utf8")
    (tmp_path / "packages" / "wheels").mkdir()
    for line in script[:package]:
        argv = shlex.split(line)
        if argv[:2] == ["python", "-c"]:  # the cleanup lines (not the wheel builds)
            subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, check=True)
    assert not (tmp_path / "packages" / f"en_{name}-{version}").exists()
    assert (tmp_path / "packages" / "wheels").exists()
