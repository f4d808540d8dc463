"""project.yml's steps re-run when what they read changes, and read what they declare (session 73's workflow probe):
fetch_assets runs for any dataset, a user's label → types map and convert's --id-map file are deps, train and
train_e2e train on the corpus of vars.corpus, pipeline_e2e's help says where its NIL threshold comes from, and the
documented way to give a preset and vars of your own lets your vars win."""
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from confection import Config
from spacy.cli._util import parse_config_overrides as cli_overrides  # what the trainers read their overrides with
from weasel.util import load_project_config, parse_config_overrides

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT / "configs" / "datasets"


def commands(argv=(), project: Path = ROOT) -> dict:
    cfg = load_project_config(project, overrides=parse_config_overrides(list(argv)))
    return {c["name"]: c for c in cfg["commands"]}


def preset(name: str) -> list:
    return shlex.split((DATASETS / name).read_text(encoding="utf8"))


def spacy_project(project: Path, argv, stdin=None):
    return subprocess.run([sys.executable, "-m", "spacy", "project", "run", *argv], cwd=project, input=stdin,
                          capture_output=True, text=True, timeout=300)


def test_fetch_assets_fetches_a_deleted_dataset_again_whatever_the_dataset(tmp_path):
    """It declared BC5CDR's and MeSH's folders as its outputs for every dataset: with the NCBI preset's
    fetch_options a deleted assets/ncbi-disease was "nothing changed", and convert then stopped on it."""
    shutil.copy(ROOT / "project.yml", tmp_path)
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "fetch_assets.py", tmp_path / "scripts")
    shared = tmp_path / "shared" / "ncbi-disease"
    shared.mkdir(parents=True)
    for name in ("NCBItrainset_corpus.txt", "NCBIdevelopset_corpus.txt", "medic_06Jul2012.txt"):
        (shared / name).write_text("x\n")
    argv = ["fetch_assets", ".", "--vars.shared", "shared", "--vars.fetch_options", " --data ncbi-disease"]
    for _ in range(2):
        shutil.rmtree(tmp_path / "assets" / "ncbi-disease", ignore_errors=True)
        run = spacy_project(tmp_path, argv)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "nothing changed" not in run.stdout
        assert (tmp_path / "assets/ncbi-disease/NCBItrainset_corpus.txt").read_text() == "x\n"
    (shared / "medic_06Jul2012.txt").write_text("a newer local copy\n")  # a refreshed local copy is copied again
    assert spacy_project(tmp_path, argv).returncode == 0
    assert (tmp_path / "assets/ncbi-disease/medic_06Jul2012.txt").read_text() == "a newer local copy\n"


def test_a_users_label_types_map_and_id_map_are_deps_of_their_steps():
    """The file a map var names is a dep of the step that reads it, so editing it re-runs the step; unset,
    each such var is a file the step depends on anyway (weasel refuses a dep that does not exist)."""
    default = commands()
    for step in ("label_types", "convert"):
        assert all((ROOT / d).exists() or d.startswith(("corpus/", "kbs/", "assets/")) for d in default[step]["deps"]), step
        assert not [d for d in default[step]["deps"] if ", " in d]  # no two var-only entries merged by weasel
    mine = commands(["--vars.label_types", "maps/my_map.json", "--vars.label_types_file", "maps/my_map.json",
                     "--vars.convert_options", " --id-map 'maps/old ids.tsv'", "--vars.convert_file", "maps/old ids.tsv",
                     "--vars.corpus_assets", "assets/mine"])
    assert "maps/my_map.json" in mine["label_types"]["deps"] and "--map 'maps/my_map.json' " in mine["label_types"]["script"][0]
    assert {str(Path(d)) for d in mine["convert"]["deps"]} == {"assets/mine", "maps/old ids.tsv"}
    for preset_file in DATASETS.glob("*.args"):  # every preset renders deps weasel can check, none merged
        rendered = commands(preset(preset_file.name))
        assert not [d for c in rendered.values() for d in c.get("deps", []) if ", " in d], preset_file.name


def test_the_documented_way_to_add_vars_to_a_preset_lets_them_win(tmp_path):
    """`xargs -a PRESET … run STEP . --vars.X Y` appends the preset's lines after the typed ones, and weasel keeps
    the last value: the preset's context window and subdir won. The documented form gives your vars last."""
    text = (ROOT / "docs" / "your-own-data.md").read_text(encoding="utf8")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("{ cat configs/datasets/") and "| xargs" in ln]
    assert line.endswith("| xargs python -m spacy project run all .")
    shutil.copy(ROOT / "project.yml", tmp_path)
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    line = line.replace("python -m spacy", f"{shlex.quote(sys.executable)} -m spacy").replace("run all .", "run train . --dry")
    run = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    typed = shlex.split(re.search(r"echo '([^']*)'", line).group(1))
    given = dict(zip(typed[::2], typed[1::2]))
    assert given["--vars.context_window"] != "64" and "--vars.context_window 64" in (DATASETS / "ncbi_medic.args").read_text()
    script = next(ln for ln in run.stdout.splitlines() if "spacy_pel.train" in ln)
    assert f"--encoder.mention_max_length {given['--vars.context_window']} " in script
    assert f"--output training{given['--vars.subdir']}/retriever " in script


def trained_on(step: dict) -> dict:
    """The corpora a rendered trainer command reads: its config file's [paths], then its overrides (the last wins)."""
    words = shlex.split(step["script"][0])
    config = Config().from_disk(ROOT / words[3], interpolate=False)
    read = {key: config["paths"][key] for key in ("train", "dev")}
    overrides = cli_overrides(words[words.index("--training.device"):])
    read.update({key: overrides[f"paths.{key}"] for key in ("train", "dev") if f"paths.{key}" in overrides})
    return read


def test_the_trainers_read_the_corpus_they_depend_on():
    """train and train_e2e depended on corpus/<corpus>_*.spacy but read the config's BC5CDR files unless train_data
    named others: with --vars.corpus X the retriever and span model trained on the old corpus."""
    cases = [[], ["--vars.corpus", "mine"], preset("ncbi_medic.args") + ["--vars.corpus", "ncbi_v2"]]
    cases += [preset(p.name) for p in sorted(DATASETS.glob("*.args"))]
    for argv in cases:
        rendered = commands(argv)
        corpus = re.search(r"corpus/(\S+)_train\.spacy", rendered["aliases"]["script"][0]).group(1)
        for step in ("train", "train_e2e", "spacy_train"):
            expected = {"train": f"corpus/{corpus}_train.spacy", "dev": f"corpus/{corpus}_dev.spacy"}
            if step != "spacy_train":
                assert trained_on(rendered[step]) == expected, (argv, step)
            assert set(expected.values()) <= set(rendered[step]["deps"]), (argv, step)


def test_pipeline_e2e_help_says_its_nil_threshold_comes_from_calibrate_e2e():
    step = commands()["pipeline_e2e"]
    assert "calibrated pipeline" not in step["help"] and "calibrate_e2e" in step["help"]
    assert not any("pipeline_calibrated" in x for x in step["script"] + step["deps"])
    assert Config().from_disk(ROOT / "configs/linker_e2e.cfg", interpolate=False)["components"]["pel_linker"]["threshold"] is None
