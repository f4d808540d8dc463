"""project.yml's dataset vars (docs/your-own-data.md): the default vars render the commands the
BC5CDR + MeSH figures were made with; the NCBI disease + MEDIC set (configs/datasets/ncbi_medic.args)
reaches every dataset step; and the `all` and `e2e` steps run on the docs' own example — its JSONL KB,
dev corpus and args file, a small BioC XML training corpus and a tiny random BERT — given the vars as a
user gives them (`{ cat ARGS; echo 'VARS'; } | xargs python -m spacy project run …`, the documented form that puts
the user's own vars after the preset's, in a subprocess for the first steps; the later steps' commands rendered by
weasel with the same vars in the same order and run in this process, to stay quick)."""
import importlib
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import bioc
import pytest
import spacy
import torch
from confection import Config
from spacy.cli import app as spacy_app
from spacy.cli._util import parse_config_overrides as cli_overrides  # what spacy_pel.train reads its overrides with
from typer.testing import CliRunner
from weasel.util import load_project_config, parse_config_overrides

from spacy_pel.bioc_corpus import pubtator_to_bioc
from spacy_pel.cli import app as pel_app
from spacy_pel.corpora import read_docbin, read_pubtator
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.pipeline.vectors import mention_text_vectors
from spacy_pel.retrieval.index import EntityIndex

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "your-own-data.md"
TRAIN = """1|t|Lithium carbonate toxicity.
1|a|Lithium carbonate caused tricuspid regurgitation and atrial flutter.
1\t0\t17\tLithium carbonate\tChem\tD1
1\t28\t45\tLithium carbonate\tChem\tD1
1\t53\t76\ttricuspid regurgitation\tDis\tD2
1\t81\t95\tatrial flutter\tDis\tD3

2|t|Aspirin and warfarin.
2|a|Aspirin with warfarin gave flutter.
2\t0\t7\tAspirin\tChem\tD4
2\t12\t20\twarfarin\tChem\tD5
2\t22\t29\tAspirin\tChem\tD4
2\t35\t43\twarfarin\tChem\tD5
2\t49\t56\tflutter\tDis\tD3
"""
DATASET_STEPS = ["convert", "build_kb", "label_types", "final_kb", "build_names", "train", "aliases", "pipeline", "calibrate",
                 "evaluate", "package", "train_e2e", "pipeline_e2e", "calibrate_e2e", "evaluate_e2e", "adapt",
                 "spacy_train", "spacy_evaluate"]
# the BC5CDR + MeSH commands as they were before the vars (git show f4f8b11:project.yml); since final_kb
# (issue 28 item 5) the name rows and the pipelines use kbs/mesh_final, the KB of the trained entity tower; the
# KB and name-index builds pass --force since session 53 (weasel re-runs a step only when its inputs changed, so
# what it finds at the output is stale: without it, re-running `all` after retraining stopped at build_names); train
# and train_e2e name the corpus they train on since session 73 (the configs' own, corpus/bc5cdr_*.spacy, by default)
BC5CDR_MESH = {
    "convert": ["python -m spacy_pel.convert assets/bc5cdr/CDR_TrainingSet.PubTator.txt corpus/bc5cdr_train.spacy",
                "python -m spacy_pel.convert assets/bc5cdr/CDR_DevelopmentSet.PubTator.txt corpus/bc5cdr_dev.spacy"],
    "build_kb": ["python -m spacy_pel.build_kb --kb assets/mesh --format mesh --encoder all-MiniLM-L6-v2 --output kbs/mesh --force --device auto"],
    "final_kb": ["python -m spacy_pel.build_kb --kb assets/mesh --format mesh --encoder training/retriever/best "
                 "--output kbs/mesh_final --reuse kbs/mesh --force --device auto"],
    "build_names": ["python -m spacy_pel build-names kbs/mesh_final --output kbs/mesh_names --force --device auto"],
    "train": ["python -m spacy_pel.train configs/train_pb_random.cfg --output training/retriever --training.device auto --encoder.base all-MiniLM-L6-v2 "
              "--encoder.mention_max_length 32 --paths.kb kbs/mesh --paths.train corpus/bc5cdr_train.spacy --paths.dev corpus/bc5cdr_dev.spacy "
              "--training.epochs 3 --loss.name ce_cosine --negatives.hard_fraction 0.5 --training.lr 0.00005"],
    "aliases": ["python -m spacy_pel.aliases corpus/bc5cdr_train.spacy --output training/aliases.json"],
    "pipeline": ["python -m spacy assemble configs/linker_rules.cfg training/pipeline --paths.kb kbs/mesh_final --paths.encoder "
                 "training/retriever/best --paths.aliases training/aliases.json --paths.names kbs/mesh_names "
                 "--components.pel_linker.context_window 32"],
    "calibrate": ["python -m spacy_pel.calibrate training/pipeline corpus/bc5cdr_dev.spacy --output training/pipeline_calibrated "
                  "--plot metrics/nil_pr_curve.png --nil classifier_pairs --max-r1-loss 0.01"],
    "package": ["python -c \"import shutil; shutil.rmtree('build', ignore_errors=True)\"",
                "python -m pip wheel . --no-deps --no-build-isolation --wheel-dir packages/wheels",
                "python -c \"import shutil, sys; shutil.rmtree(sys.argv[1], ignore_errors=True)\" packages/en_pel_bc5cdr_mesh-0.1.0",
                "python -m spacy package training/pipeline_calibrated packages --name pel_bc5cdr_mesh --version 0.1.0 "
                "--build wheel --force"],  # a wheel since issue 32 item 7 (before: the sdist)
    "evaluate": ["python -m spacy_pel.evaluate corpus/bc5cdr_dev.spacy --pipeline training/pipeline_calibrated --train "
                 "corpus/bc5cdr_train.spacy --output metrics/bc5cdr_dev.json --markdown metrics/bc5cdr_dev.md "
                 '--title "BC5CDR dev vs MeSH"'],  # its title since session 68
    "train_e2e": ["python -m spacy_pel.train_e2e configs/train_e2e.cfg --output training/e2e --seeds 1 --training.device auto "
                  "--encoder.base training/retriever/best --paths.kb kbs/mesh_final --paths.train corpus/bc5cdr_train.spacy "
                  "--paths.dev corpus/bc5cdr_dev.spacy --training.max_steps 0"],
    "pipeline_e2e": ["python -m spacy assemble configs/linker_e2e.cfg training/pipeline_e2e --paths.kb kbs/mesh_final --paths.encoder "
                     "training/retriever/best --paths.span_model training/e2e --paths.aliases training/aliases.json "
                     "--paths.names kbs/mesh_names --components.pel_linker.context_window 32"],
    "calibrate_e2e": ["python -m spacy_pel.calibrate training/pipeline_e2e corpus/bc5cdr_dev.spacy --output training/pipeline_e2e_calibrated --e2e --nil classifier --plot metrics/bc5cdr_dev_e2e_threshold.png"],
    "evaluate_e2e": ["python -m spacy_pel.evaluate corpus/bc5cdr_dev.spacy --pipeline training/pipeline_e2e_calibrated --e2e "
                     '--output metrics/bc5cdr_dev_e2e.json --markdown metrics/bc5cdr_dev_e2e.md --title "end to end on BC5CDR dev vs MeSH"'],
    "fetch_assets": ["python scripts/fetch_assets.py --local ../shared/data --assets assets"],
}


def render(project: Path, argv, quoted: bool = False):
    """The commands (by name) and workflows of ``project``'s project.yml with the ``--vars.x y`` of ``argv``;
    the quotes around path vars (``--kb '${vars.kb_source}'``) dropped where the path is one word, as the
    command receives it, unless ``quoted``."""
    cfg = load_project_config(project, overrides=parse_config_overrides(list(argv)))
    commands = {c["name"]: c for c in cfg["commands"]}
    if not quoted:
        for c in commands.values():
            c["script"] = [re.sub(r"(?<= )'([^' \"]*)'(?=[ \"]|$)", r"\1", line) for line in c.get("script", [])]
    return commands, cfg["workflows"]


PATH_VARS = ("kb_source", "encoder", "dev_corpus", "transfer_from", "transfer_corpus", "shared", "label_types", "train_config",
             "linker_config", "linker_e2e_config")


def test_path_vars_holding_a_space_reach_every_command_as_one_argument():
    """Defect: project.yml pasted the path vars into its script lines unquoted, and weasel splits a line
    like a shell: a KB file, corpus or encoder folder whose path held a space reached the command in two."""
    argv = [w for var in PATH_VARS for w in (f"--vars.{var}", f"my data/{var} x")]
    commands, _ = render(ROOT, argv, quoted=True)
    seen = {var: 0 for var in PATH_VARS}
    for name, command in commands.items():
        for line in command.get("script", []):
            words = shlex.split(line)
            assert not any(w.startswith("x") or w.endswith("data/") or w == "my" for w in words), (name, line)
            for var in PATH_VARS:
                seen[var] += sum(f"my data/{var} x" in w for w in words)
    assert all(seen.values()), seen


def args_file(path: Path):
    """An args file split as ``xargs`` splits it (blanks outside quotes; quotes kept together)."""
    return shlex.split(path.read_text(encoding="utf8"))


def paths_are_single(commands: dict) -> list:
    """Rendered deps and outputs that weasel's interpolation merged into one "a, b" string."""
    return [p for c in commands.values() for p in c.get("deps", []) + c.get("outputs", []) if ", " in p]


def run_line(line: str) -> None:
    """A rendered script line (``python -m spacy_pel[.module] …`` or ``python -m spacy …``) run in this process."""
    words = shlex.split(line)
    assert words[:2] == ["python", "-m"], line
    module, args = words[2], words[3:]
    app = spacy_app if module == "spacy" else pel_app if module == "spacy_pel" else importlib.import_module(module).app
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, f"{line}\n{result.output[-3000:]}"


def doc_blocks(section: str) -> list:
    """The fenced code blocks of docs/your-own-data.md's section ``section``."""
    text = DOC.read_text(encoding="utf8").split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)


def test_default_vars_render_the_bc5cdr_mesh_commands():
    commands, workflows = render(ROOT, [])
    for name, script in BC5CDR_MESH.items():
        assert commands[name]["script"] == script, name
    assert commands["train"]["deps"] == ["configs/train_pb_random.cfg", "corpus/bc5cdr_train.spacy", "corpus/bc5cdr_dev.spacy", "kbs/mesh"]
    assert commands["evaluate"]["outputs"] == ["metrics/bc5cdr_dev.json", "metrics/bc5cdr_dev.md"]
    assert commands["fetch_assets"]["outputs"] == ["assets/bc5cdr", "assets/mesh"] and commands["fetch_assets"]["no_skip"]
    assert workflows["all"] == ["fetch_assets", "convert", "build_kb", "label_types", "train", "final_kb", "build_names",
                                "aliases", "pipeline", "calibrate", "evaluate", "package"]
    assert commands["final_kb"]["deps"] == ["assets/mesh", "kbs/mesh", "training/retriever/best"]
    assert workflows["e2e"] == ["train_e2e", "pipeline_e2e", "calibrate_e2e", "evaluate_e2e"]
    assert not paths_are_single(commands)


def test_titles_with_quotes_and_another_encoder_reach_every_command():
    # an apostrophe in a title closed the single quotes it was written in (weasel: "No closing quotation");
    # spacy_train took configs/spacy_train.cfg's MiniLM whatever vars.encoder said, and refused the KB it built
    commands, _ = render(ROOT, ["--vars.corpus_title", "Crohn's disease corpus", "--vars.kb_title", "Alzheimer's KB",
                                "--vars.encoder", "my/encoder"])
    titled = {name: shlex.split(line) for name, c in commands.items() for line in c["script"] if "--title" in line}
    assert {"evaluate", "evaluate_e2e", "evaluate_kb_only", "evaluate_transfer"} <= set(titled)
    for name, words in titled.items():
        title = words[words.index("--title") + 1]
        assert name.startswith("demo") or "Crohn's disease corpus dev vs Alzheimer's KB" in title, (name, title)
    train = shlex.split(commands["spacy_train"]["script"][0])
    assert train[train.index("--paths.encoder") + 1] == "my/encoder"


def test_the_silver_preset_adapts_from_base_minilm_and_starts_the_rest_from_its_output():
    commands, workflows = render(ROOT, args_file(ROOT / "configs" / "datasets" / "bc5cdr_mesh_silver.args"))
    all_steps = workflows["all"]
    # all's steps, silver and adapt first, the KB encoded by a step that depends on adapt's output (weasel re-runs
    # it, and so train, when adapt is re-run, e.g. with another --vars.adapt_minutes)
    assert workflows["all_silver"] == all_steps[:2] + ["silver", "adapt", "build_kb_silver"] + all_steps[3:]
    assert all_steps[2] == "build_kb" and commands["build_kb_silver"]["script"] == commands["build_kb"]["script"]
    assert commands["build_kb_silver"]["deps"] == ["assets/mesh", "training/silver/adapted"] == commands["adapt"]["deps"][:1] + commands["adapt"]["outputs"]
    assert commands["build_kb_silver"]["outputs"] == commands["build_kb"]["outputs"] == ["kbs/mesh_silver"]
    assert commands["silver"]["script"] == [
        "python -m spacy_pel silver corpus/bc5cdr_train.spacy --kb assets/mesh --format mesh -o corpus/bc5cdr_mesh_silver_silver.spacy "
        "--swap 0.5 --types 'Chemicals and Drugs' --types Diseases"]
    adapt = shlex.split(commands["adapt"]["script"][0])
    assert adapt[adapt.index("--encoder") + 1] == "all-MiniLM-L6-v2" and adapt[adapt.index("-o") + 1] == "training/silver/adapted"
    assert adapt[adapt.index("--paths.train") + 1] == "corpus/bc5cdr_mesh_silver_silver.spacy"
    assert "--encoder training/silver/adapted --output kbs/mesh_silver " in commands["build_kb"]["script"][0]
    train = shlex.split(commands["train"]["script"][0])
    # the adapted encoder's own entity length: train_pb_random.cfg's 64 would change its KB vectors (refused)
    assert train[train.index("--encoder.base") + 1] == "training/silver/adapted" and train[-2:] == ["--encoder.entity_max_length", "32"]
    # without the preset, adapt starts from vars.encoder, whatever it is set to
    assert "--encoder foo " in render(ROOT, ["--vars.encoder", "foo"])[0]["adapt"]["script"][0]
    assert not paths_are_single(commands)


def test_the_aligned_workflow_trains_the_retriever_as_self_alignment_before_encoding_the_kb_once():
    commands, workflows = render(ROOT, args_file(ROOT / "configs" / "datasets" / "bc5cdr_mesh_aligned.args"))
    steps = workflows["all"]
    # all's steps with train replaced by align, which comes before the KB (its entity tower encodes it)
    assert workflows["all_aligned"] == steps[:2] + ["align", "build_kb_aligned"] + [s for s in steps[3:] if s != "train"]
    align = shlex.split(commands["align"]["script"][0])
    assert align[:4] == ["python", "-m", "spacy_pel", "adapt"] and align[align.index("--paths.train") + 1] == "corpus/bc5cdr_train.spacy"
    assert align[align.index("--synonyms.replay") + 1] == "0.5" and align[align.index("--encoder") + 1] == "all-MiniLM-L6-v2"
    # its output is where train's would be, so final_kb, pipeline and e2e read it unchanged
    assert commands["align"]["outputs"] == commands["train"]["outputs"] == ["training/aligned/retriever/best"]
    assert commands["build_kb_aligned"]["deps"] == ["assets/mesh", "training/aligned/retriever/best"]
    assert "--encoder training/aligned/retriever/best --output kbs/mesh_aligned " in commands["build_kb_aligned"]["script"][0]
    assert "--reuse kbs/mesh_aligned " in commands["final_kb"]["script"][0]  # the same tower: copied, not encoded again
    assert not paths_are_single(commands)


def test_the_ncbi_medic_set_reaches_every_dataset_step():
    commands, _ = render(ROOT, args_file(ROOT / "configs" / "datasets" / "ncbi_medic.args"))
    rendered = json.dumps({k: (commands[k]["script"], commands[k]["deps"], commands[k]["outputs"]) for k in DATASET_STEPS})
    assert "bc5cdr" not in rendered.lower() and "mesh" not in rendered.lower(), rendered
    assert not paths_are_single(commands)
    assert commands["fetch_assets"]["script"] == ["python scripts/fetch_assets.py --local ../shared/data --assets assets --data ncbi-disease"]
    assert commands["convert"]["script"] == [
        "python -m spacy_pel.convert assets/ncbi-disease/NCBItrainset_corpus.txt corpus/ncbi_train.spacy --skip-bad-lines",
        "python -m spacy_pel.convert assets/ncbi-disease/NCBIdevelopset_corpus.txt corpus/ncbi_dev.spacy --skip-bad-lines"]
    assert commands["build_kb"]["script"] == ["python -m spacy_pel.build_kb --kb assets/ncbi-disease/medic_06Jul2012.txt "
                                              "--format medic --encoder all-MiniLM-L6-v2 --output kbs/medic --force --device auto"]
    data = "--paths.train corpus/ncbi_train.spacy --paths.dev corpus/ncbi_dev.spacy"
    assert commands["train"]["script"][0].endswith(f"--paths.kb kbs/medic {data} --training.epochs 3 --loss.name ce_cosine "
                                                   f"--negatives.hard_fraction 0.5 --training.lr 0.00005")
    assert commands["train_e2e"]["script"][0].endswith(f"--paths.kb kbs/medic_final {data} --training.max_steps 0")
    assert commands["pipeline"]["script"][0].startswith("python -m spacy assemble training/ncbi_medic/linker_rules.cfg training/ncbi_medic/pipeline ")
    assert commands["pipeline_e2e"]["script"][0].startswith("python -m spacy assemble training/ncbi_medic/linker_e2e.cfg ")
    assert commands["package"]["script"][-1].endswith("--name pel_ncbi_medic --version 0.1.0 --build wheel --force")
    assert commands["evaluate_e2e"]["script"][0].endswith("--title \"end to end on NCBI disease dev vs MEDIC\"")


def test_the_both_towers_preset_trains_both_and_links_against_the_final_kb():
    commands, _ = render(ROOT, args_file(ROOT / "configs" / "datasets" / "ncbi_medic_both.args"))
    rendered = json.dumps({k: (commands[k]["script"], commands[k]["deps"], commands[k]["outputs"]) for k in DATASET_STEPS})
    assert "bc5cdr" not in rendered.lower() and "mesh" not in rendered.lower(), rendered
    assert commands["train"]["script"][0].startswith("python -m spacy_pel.train configs/train_both.cfg --output training/ncbi_medic_both/retriever ")
    assert commands["final_kb"]["script"] == [
        "python -m spacy_pel.build_kb --kb assets/ncbi-disease/medic_06Jul2012.txt --format medic --encoder "
        "training/ncbi_medic_both/retriever/best --output kbs/medic_both_final --reuse kbs/medic_both --force --device auto"]
    assert "--paths.kb kbs/medic_both_final " in commands["pipeline"]["script"][0]
    assert "--paths.names kbs/medic_both_names " in commands["pipeline"]["script"][0]


def test_two_training_corpora_for_one_kb_reach_convert_and_fetch():
    """configs/datasets/ncbi_bc5dis_medic.args: both files in one training conversion, the label filter on both lines."""
    commands, _ = render(ROOT, args_file(ROOT / "configs" / "datasets" / "ncbi_bc5dis_medic.args"))
    labels = "--labels Disease --labels SpecificDisease --labels DiseaseClass --labels Modifier --labels CompositeMention"
    assert commands["convert"]["script"] == [
        "python -m spacy_pel.convert assets/ncbi-disease/NCBItrainset_corpus.txt assets/bc5cdr/CDR_TrainingSet.PubTator.txt "
        f"corpus/ncbi_bc5dis_train.spacy --skip-bad-lines {labels}",
        f"python -m spacy_pel.convert assets/ncbi-disease/NCBIdevelopset_corpus.txt corpus/ncbi_bc5dis_dev.spacy --skip-bad-lines {labels}"]
    assert commands["fetch_assets"]["script"][0].endswith("--data ncbi-disease --data bc5cdr")
    assert commands["aliases"]["script"] == ["python -m spacy_pel.aliases corpus/ncbi_bc5dis_train.spacy --output training/ncbi_bc5dis/aliases.json"]
    assert "--paths.kb kbs/medic_both_final " in commands["pipeline"]["script"][0]


def test_the_bc5cdr_ncbi_preset_is_the_default_recipe_on_both_training_corpora():
    """configs/datasets/bc5cdr_ncbi_mesh.args (benchmarks/together_default.md): the default `all` with NCBI disease train
    beside BC5CDR's, against MeSH — the same retriever recipe and KB, both training files in one conversion."""
    default, _ = render(ROOT, [])
    commands, _ = render(ROOT, args_file(ROOT / "configs" / "datasets" / "bc5cdr_ncbi_mesh.args"))
    assert commands["convert"]["script"][0] == ("python -m spacy_pel.convert assets/bc5cdr/CDR_TrainingSet.PubTator.txt "
                                                "assets/ncbi-disease/NCBItrainset_corpus.txt corpus/bc5cdr_ncbi_train.spacy --skip-bad-lines")
    assert commands["fetch_assets"]["script"][0].endswith("--data bc5cdr --data mesh --data ncbi-disease")
    train = commands["train"]["script"][0]
    assert train == default["train"]["script"][0].replace("training/retriever", "training/bc5cdr_ncbi/retriever").replace(
        "corpus/bc5cdr_", "corpus/bc5cdr_ncbi_")
    assert commands["build_kb"]["script"] == default["build_kb"]["script"]  # MeSH encoded as the default encodes it


def retriever_overrides(argv) -> dict:
    """The config overrides the rendered ``train`` command gives the retriever, as its CLI reads them (last wins)."""
    commands, _ = render(ROOT, argv)
    words = shlex.split(commands["train"]["script"][0])
    return cli_overrides(words[words.index("--training.device"):])


def test_retriever_epochs_var_and_a_users_own_epochs_override_it():
    default = retriever_overrides([])
    assert default["training.epochs"] == 3 and default["loss.name"] == "ce_cosine" and default["training.lr"] == 0.00005
    # the NCBI preset changes the epochs alone: the rest of the default recipe reaches it unchanged
    ncbi = retriever_overrides(args_file(ROOT / "configs" / "datasets" / "ncbi_medic_both.args"))
    assert ncbi["training.epochs"] == 2 and {k: v for k, v in ncbi.items() if k.startswith(("loss.", "negatives.", "training.lr"))} == \
        {k: v for k, v in default.items() if k.startswith(("loss.", "negatives.", "training.lr"))}
    # an epochs override of the user's own (project.yml's example) comes after the var, and wins
    assert retriever_overrides(["--vars.retriever_epochs", "2", "--vars.train_overrides", " --training.epochs 1"])["training.epochs"] == 1


def test_build_options_send_the_kb_and_name_rows_to_ray():
    commands, _ = render(ROOT, ["--vars.build_options", " --ray --workers 4"])
    assert commands["build_kb"]["script"] == [BC5CDR_MESH["build_kb"][0] + " --ray --workers 4"]
    assert commands["build_names"]["script"][0].endswith("--output kbs/mesh_names --force --device auto --ray --workers 4")
    assert commands["build_kb"]["outputs"] == ["kbs/mesh"]


def docs_project(tmp_path: Path, tiny_encoder_dir) -> tuple:
    """docs/your-own-data.md's example as a project folder (the training corpus in BioC XML), and the
    test's own vars: a tiny model, a few steps."""
    kb_block, dev_block, args_block = doc_blocks("Example: your own catalogue (JSONL KB) and a small corpus")
    project = tmp_path / "project"
    shutil.copytree(ROOT / "configs", project / "configs")
    shutil.copy(ROOT / "project.yml", project)
    (project / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "fetch_assets.py", project / "scripts")
    assets = project / "assets" / "mine"
    assets.mkdir(parents=True)
    (assets / "train.txt").write_text(TRAIN)
    with open(assets / "train.xml", "w", encoding="utf8") as fp:  # the training corpus in BioC XML
        bioc.biocxml.dump(pubtator_to_bioc(read_pubtator(assets / "train.txt")), fp)
    (assets / "train.txt").unlink()
    (assets / "dev.txt").write_text(dev_block)
    (assets / "catalogue.jsonl").write_text(kb_block)
    (project / "configs" / "datasets" / "mine.args").write_text(args_block)
    enc = str(tiny_encoder_dir)  # the test's own settings: a tiny model, a few steps
    extra = ["--vars.encoder", enc, "--vars.device", "cpu", "--vars.context_window", "16", "--vars.nil", "top_score",
             "--vars.e2e_max_steps", "2", "--vars.train_overrides",
             f" --encoder.base {enc} --training.max_steps 2 --training.batch_size 4 --negatives.count 3 "
             "--training.eval_every 2 --training.eval_docs 0"]
    return project, extra


def fetch_and_convert(project: Path, extra: list) -> None:
    """The documented line for a preset and vars of your own, ``{ cat ARGS; echo 'VARS'; } | xargs python -m spacy
    project run STEP .`` (the vars after the preset's, so they win, as :func:`render` gives them), for the first two
    steps."""
    lines = (project / "configs" / "datasets" / "mine.args").read_text(encoding="utf8").rstrip("\n") + "\n" + shlex.join(extra) + "\n"
    for step in ("fetch_assets", "convert"):
        run = subprocess.run(["xargs", sys.executable, "-m", "spacy", "project", "run", step, "."], input=lines,
                             capture_output=True, text=True, cwd=project, timeout=300)
        assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"


@pytest.mark.parametrize("recipe", ["frozen", "both"])
def test_the_docs_example_through_all_and_e2e(recipe, tmp_path, tiny_encoder_dir, monkeypatch):
    """``both``: configs/train_both.cfg, so final_kb encodes the KB anew with the trained entity tower and
    every pipeline is assembled with it (a KB of the other tower would be refused)."""
    project, extra = docs_project(tmp_path, tiny_encoder_dir)
    if recipe == "frozen":
        extra += ["--vars.e2e_nil", "top_score"]  # the e2e NIL decision: a threshold on the best score
    if recipe == "both":
        extra += ["--vars.train_config", "configs/train_both.cfg"]
        extra[extra.index("--vars.train_overrides") + 1] += " --training.eval_kb_sample 2 --negatives.pool 3 --negatives.refresh_every 2"
        extra += ["--vars.e2e_seeds", "2"]  # and two span models, averaged by the e2e pipeline
    fetch_and_convert(project, extra)
    commands, workflows = render(project, args_file(project / "configs" / "datasets" / "mine.args") + extra)
    monkeypatch.chdir(project)
    assert workflows["all"][:2] == ["fetch_assets", "convert"] and workflows["all"][-1] == "package"
    for step in workflows["all"][2:-1] + workflows["e2e"]:  # not package (pip wheel, spacy package: slow)
        for line in commands[step]["script"]:
            run_line(line)
    # the vars reached every command: the corpora, the JSONL KB, the learned map, the outputs' folders
    nlp = spacy.blank("en")
    assert [len(read_docbin(nlp, project / "corpus" / f"mine_{s}.spacy")) for s in ("train", "dev")] == [2, 1]
    assert json.loads((project / "kbs/catalogue/meta.json").read_text()) and (project / "kbs/catalogue_names").is_dir()
    final = json.loads((project / "kbs/catalogue_final/build_report.json").read_text())
    if recipe == "frozen":  # the entity tower stayed frozen: the final KB is the first one, copied, not encoded again
        assert final["reused_from"] == "kbs/catalogue"
    else:  # it learned: the final KB is encoded by it, and differs from the base tower's
        assert "reused_from" not in final and final["entities_encoded"] == 5
        base, last = (EntityIndex.from_disk(project / f"kbs/{k}") for k in ("catalogue", "catalogue_final"))
        assert base.fingerprint != last.fingerprint
        last.check_encoder(BiEncoder.from_pretrained(project / "training/mine/retriever/best"))
    assert json.loads((project / "training/mine/label_types.json").read_text()) == {"Chem": ["Chemical"], "Dis": ["Disease"]}
    for pipeline in ("pipeline_calibrated", "pipeline_e2e_calibrated"):
        linker = spacy.load(project / "training/mine" / pipeline).get_pipe("pel_linker")
        assert linker.rules["label_types"].allowed == {"Chem": {"Chemical"}, "Dis": {"Disease"}}, pipeline
        assert len(linker.index.entities) == 5 and all(linker.index.resolve(f"D{i}") is not None for i in range(1, 6))
    finder = spacy.load(project / "training/mine/pipeline_e2e_calibrated").get_pipe("pel_linker").mentions
    assert finder.member_sources == ([] if recipe == "frozen" else ["training/mine/e2e/seeds/1/best"])
    calibration = json.loads((project / "training/mine/pipeline_calibrated/nil_calibration.json").read_text())
    assert calibration["calibrated"] and calibration["nil_mentions"] == 1 and "classifier" not in calibration
    e2e_calibration = json.loads((project / "training/mine/pipeline_e2e_calibrated/nil_calibration.json").read_text())
    if recipe == "frozen":
        assert "classifier" not in e2e_calibration
    else:  # the default classifier: fitted, or (a one-document dev corpus) nothing to tell apart, and the summary says so
        assert e2e_calibration["classifier"] is not None or "no classifier can be fitted" in e2e_calibration["reason"]
    assert "R@1" in (project / "metrics/mine/mine_dev.md").read_text() and (project / "metrics/mine/nil_pr_curve.png").exists()
    assert "end to end on my corpus dev vs my catalogue" in (project / "metrics/mine/mine_dev_e2e.md").read_text()
    assert not [p for p in ("training/pipeline", "training/retriever", "metrics/bc5cdr_dev.json", "kbs/mesh", "corpus/bc5cdr_train.spacy")
                if (project / p).exists()]
    if recipe == "both":  # a user retrains (another seed): weasel re-runs the steps after train, and each replaces its stale output
        extra[extra.index("--vars.train_overrides") + 1] += " --training.seed 1"
        commands, _ = render(project, args_file(project / "configs" / "datasets" / "mine.args") + extra)
        for step in ("train", "final_kb", "build_names"):
            for line in commands[step]["script"]:
                run_line(line)
        retrained = EntityIndex.from_disk(project / "kbs/catalogue_final")
        assert retrained.fingerprint != last.fingerprint
        names = json.loads((project / "kbs/catalogue_names/build_report.json").read_text())
        assert names["names_encoded"] == names["names"]  # encoded again by the retrained tower, none reused
        meta = json.loads((project / "kbs/catalogue_names/meta.json").read_text())
        assert meta["encoder_fingerprint"] == retrained.fingerprint


def test_the_docs_example_through_kb_only(tmp_path, tiny_encoder_dir, monkeypatch):
    """A KB and no training corpus: adapt on the catalogue's synonyms, the KB and name rows encoded by the
    adapted encoder, a pipeline linking each mention by its own words, scored on the dev corpus."""
    project, extra = docs_project(tmp_path, tiny_encoder_dir)
    extra += ["--vars.adapt_options", " --synonyms.steps 2 --synonyms.eval_entities 1 --training.batch_size 2 "
              "--training.eval_every 2 --training.eval_kb_sample 2 --negatives.pool 3 --negatives.refresh_every 2 "
              "--training.precision fp32"]
    fetch_and_convert(project, extra)
    commands, workflows = render(project, args_file(project / "configs" / "datasets" / "mine.args") + extra)
    assert workflows["kb_only"] == ["fetch_assets", "convert", "silver", "adapt", "build_kb_adapted", "build_names_adapted",
                                    "pipeline_kb_only", "evaluate_kb_only"]
    monkeypatch.chdir(project)
    for step in workflows["kb_only"][2:]:
        for line in commands[step]["script"]:
            run_line(line)
    silver = read_docbin(spacy.blank("en"), project / "corpus/mine_catalogue_silver.spacy")  # the catalogue's names in the text
    assert silver and all(s.kb_id_ in {f"D{i}" for i in range(1, 6)} for d in silver for s in d.ents)
    adapt_run = Config().from_disk(project / "training/mine/adapted.work/config.cfg")
    assert (adapt_run["paths"]["train"], adapt_run["synonyms"]["replay"]) == ("corpus/mine_catalogue_silver.spacy", 0.5)
    adapted = BiEncoder.from_pretrained(project / "training/mine/adapted")
    base = BiEncoder.from_pretrained(tiny_encoder_dir)
    assert any(not torch.equal(a, b) for a, b in zip(adapted.entity_model.state_dict().values(),
                                                     base.entity_model.state_dict().values()))  # both towers learned
    EntityIndex.from_disk(project / "kbs/catalogue_adapted").check_encoder(adapted)  # encoded by the adapted towers
    linker = spacy.load(project / "training/mine/pipeline_kb_only").get_pipe("pel_linker")
    assert linker.vectors is not mention_text_vectors and linker.cfg.context_window == 64  # in context: silver taught it
    assert len(linker.index.entities) == 5
    assert linker.rules["aliases"].counts is None  # KB names only: no surface forms from annotated text
    assert "R@1" in (project / "metrics/mine/mine_dev_kb_only.md").read_text()
    # transfer: that pipeline's encoder taught the catalogue again, then the pipeline retargeted to the KB it encoded
    extra += ["--vars.transfer_from", "training/mine/pipeline_kb_only", "--vars.transfer_corpus", "corpus/mine_train.spacy",
              "--vars.transfer_steps", "2", "--vars.transfer_options",
              " --synonyms.eval_entities 1 --training.batch_size 2 --training.eval_every 2 "
              "--training.eval_kb_sample 2 --negatives.pool 3 --negatives.refresh_every 2 --training.precision fp32"]
    commands, workflows = render(project, args_file(project / "configs" / "datasets" / "mine.args") + extra)
    assert workflows["transfer"][2:] == ["adapt_transfer", "build_kb_transfer", "build_names_transfer", "retarget",
                                         "evaluate_transfer"]
    for step in workflows["transfer"][2:]:
        for line in commands[step]["script"]:
            run_line(line)
    taught = BiEncoder.from_pretrained(project / "training/mine/transfer_encoder")
    run = Config().from_disk(project / "training/mine/transfer_encoder.work/config.cfg")
    assert (run["paths"]["train"], run["synonyms"]["replay"]) == ("corpus/mine_train.spacy", 0.25)  # its mentions replayed
    assert taught.fingerprint() != adapted.fingerprint()  # taught again from the pipeline's encoder
    moved = spacy.load(project / "training/mine/pipeline_transfer").get_pipe("pel_linker")
    moved.ensure_loaded()
    assert moved.index.fingerprint == taught.fingerprint() != linker.index.fingerprint
    assert moved.vectors is linker.vectors and moved.cfg.context_window == 64  # the source pipeline's strategies kept
    assert "R@1" in (project / "metrics/mine/mine_dev_transfer.md").read_text()
    assert json.loads((project / "training/mine/transfer_encoder/adapt_log.json").read_text())["step"] == 2
    # the plain route (no self-alignment): the KB encoded by the pipeline's own encoder, as it is
    commands, workflows = render(project, args_file(project / "configs" / "datasets" / "mine.args") + extra
                                 + ["--vars.transfer_steps", "0"])
    for step in workflows["transfer"][2:]:
        for line in commands[step]["script"]:
            run_line(line)
    plain = spacy.load(project / "training/mine/pipeline_transfer").get_pipe("pel_linker")
    plain.ensure_loaded()
    assert plain.index.fingerprint == linker.index.fingerprint != taught.fingerprint()


def test_the_final_model_preset_trains_on_train_and_dev():
    """configs/datasets/ncbi_medic_final.args: the NCBI preset's settings, its training corpus NCBI train + dev (a final
    model, as BioSyn trains for its test figures), its own KB and output names so it clobbers nothing of the preset's."""
    final, workflows = render(ROOT, args_file(ROOT / "configs" / "datasets" / "ncbi_medic_final.args"))
    preset = render(ROOT, args_file(ROOT / "configs" / "datasets" / "ncbi_medic_both.args"))[0]
    assert final["convert"]["script"][0] == ("python -m spacy_pel.convert assets/ncbi-disease/NCBItrainset_corpus.txt "
                                             "assets/ncbi-disease/NCBIdevelopset_corpus.txt corpus/ncbi_final_train.spacy --skip-bad-lines")
    settings = [{k: v for k, v in retriever_overrides(args_file(ROOT / "configs" / "datasets" / name)).items()
                 if not k.startswith("paths.")} for name in ("ncbi_medic_final.args", "ncbi_medic_both.args")]
    assert settings[0] == settings[1] and settings[0]["training.epochs"] == 2  # the same recipe
    steps = [step for step in workflows["all"] + workflows["e2e"] if step != "fetch_assets"]
    shared = {out for step in steps for out in final[step]["outputs"]} & {out for step in steps for out in preset[step]["outputs"]}
    assert shared == {"packages"}  # the folder of every package, each under its own name
    assert final["package"]["script"][-1] != preset["package"]["script"][-1]
