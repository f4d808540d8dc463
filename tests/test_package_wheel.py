"""The packaged pipeline is a wheel (issue 32 item 7): project.yml's ``package`` lines, run as written
(only the pipeline and ``packages`` folders moved into a temporary folder), build a spacy_pel wheel
and a wheel of a tiny pipeline (random BERT, five-entity KB); both install with one offline pip
command (``--no-index --find-links``) into a fresh virtualenv, which loads the pipeline by its package
name and links a sentence as the source pipeline did, with the KB and encoder folders it was made
from deleted. The venv sees the machine's packages (``--system-site-packages``: torch and spaCy are
not downloaded) but gets no pip or setuptools of its own: the machine's pip installs into it, and
the venv's bundled setuptools, older than torch requires, would make the offline install fail.

Also: without the PyPI package ``build`` (``pip install -e '.[package]'``), ``spacy package --build
wheel`` says so in one line and stops."""
import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import spacy
from spacy.cli import app as spacy_app
from typer.testing import CliRunner
from weasel.util import load_project_config, parse_config_overrides

import spacy_pel  # noqa: F401  (registers the factory)

ROOT = Path(__file__).resolve().parents[1]
NAME, VERSION = "pel_wheel_test", "0.0.1"
PACKAGE = f"en_{NAME}"
TEXT = "Aspirin and warfarin gave atrial flutter, not lithium carbonate."
PATTERNS = [{"label": "Chemical", "pattern": [{"LOWER": "aspirin"}]},
            {"label": "Chemical", "pattern": [{"LOWER": "warfarin"}]},
            {"label": "Chemical", "pattern": [{"LOWER": "lithium"}, {"LOWER": "carbonate"}]},
            {"label": "Disease", "pattern": [{"LOWER": "atrial"}, {"LOWER": "flutter"}]}]
IN_VENV = f"""
import importlib.metadata as md, json, sys
import spacy, spacy_pel
nlp = spacy.load({PACKAGE!r})
doc = nlp({TEXT!r})
print(json.dumps({{"prefix": sys.prefix, "spacy_pel": spacy_pel.__file__, "package": nlp.path.as_posix(),
                  "requires": md.requires({PACKAGE!r}), "ents": [[e.text, e.kb_id_] for e in doc.ents]}}))
"""


def package_script(pipeline: Path, packages: Path) -> list:
    """project.yml's ``package`` lines, rendered by weasel with this test's name and version, with
    ``training/pipeline_calibrated`` and ``packages`` replaced by ``pipeline`` and ``packages``."""
    overrides = parse_config_overrides(["--vars.package_name", NAME, "--vars.package_version", VERSION])
    (command,) = [c for c in load_project_config(ROOT, overrides=overrides)["commands"] if c["name"] == "package"]
    lines = []
    for line in command["script"]:
        words = shlex.split(line)
        assert words[0] == "python", line
        moved = {"training/pipeline_calibrated": str(pipeline), "packages": str(packages)}
        words = [moved.get(w, str(packages / w[len("packages/"):]) if w.startswith("packages/") else w) for w in words]
        lines.append([sys.executable] + words[1:])
    return lines


def run(argv, **kwargs) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3600, **kwargs)
    assert done.returncode == 0, f"{shlex.join(map(str, argv))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def offline_env() -> dict:
    """This environment without the machine's pip settings (index, find-links, config file) and one torch thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@pytest.mark.slow  # two wheel builds, a venv and an install: minutes on 2 busy cores
def test_the_packaged_pipeline_is_a_wheel_that_installs_offline(tmp_path, kb_dir, tiny_encoder_dir):
    src = tmp_path / "src"  # the folders the pipeline is made from, deleted before the venv links
    shutil.copytree(kb_dir, src / "kb")
    shutil.copytree(tiny_encoder_dir, src / "encoder")
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns(PATTERNS)
    nlp.add_pipe("pel_linker", config={"kb": str(src / "kb"), "encoder": str(src / "encoder"), "top_k": 3})
    expected = [[e.text, e.kb_id_] for e in nlp(TEXT).ents]  # linking loads the KB and encoder: to_disk saves them
    assert len(expected) == 4 and all(kb_id for _, kb_id in expected)
    nlp.to_disk(tmp_path / "pipeline")

    packages = tmp_path / "packages"
    packages.mkdir()
    stale = ROOT / "build" / "lib" / "spacy_pel" / "stale_s71.py"  # a module deleted from the sources since a build
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("", encoding="utf8")
    for argv in package_script(tmp_path / "pipeline", packages):
        run(argv, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    (spacy_pel_wheel,) = (packages / "wheels").glob("spacy_pel-*.whl")
    assert "spacy_pel/stale_s71.py" not in zipfile.ZipFile(spacy_pel_wheel).namelist()  # build/ cleared first
    dist = packages / f"{PACKAGE}-{VERSION}" / "dist"
    assert sorted(p.name for p in dist.iterdir()) == [f"{PACKAGE}-{VERSION}-py3-none-any.whl"]  # a wheel, no sdist
    pipeline_wheel = dist / f"{PACKAGE}-{VERSION}-py3-none-any.whl"
    inside = zipfile.ZipFile(pipeline_wheel).namelist()
    assert f"{PACKAGE}/{PACKAGE}-{VERSION}/pel_linker/kb/embeddings.npy" in inside
    shutil.rmtree(src)

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    wheels = tmp_path / "wheels"  # the two wheels in one folder, as copied to a machine without the checkout
    wheels.mkdir()
    for wheel in (spacy_pel_wheel, pipeline_wheel):
        shutil.copy(wheel, wheels)
    run([python, "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
         str(wheels / spacy_pel_wheel.name), str(wheels / pipeline_wheel.name)], cwd=tmp_path, env=offline_env())
    seen = json.loads(run([python, "-c", IN_VENV], cwd=tmp_path, env=offline_env()).splitlines()[-1])
    site = Path(seen["prefix"]).resolve()
    assert site == venv.resolve()
    assert Path(seen["spacy_pel"]).resolve().is_relative_to(site)  # the wheel's spacy_pel, not the checkout's
    assert Path(seen["package"]).resolve().is_relative_to(site)
    assert any(r.startswith("spacy_pel") for r in seen["requires"])
    assert seen["ents"] == expected


def test_package_without_build_says_what_to_install(tmp_path, monkeypatch):
    """``spacy package --build wheel`` needs ``build`` (or the deprecated ``wheel``): without either
    it stops at once with one line naming it, before it copies anything."""
    package_module = sys.modules["spacy.cli.package"]
    monkeypatch.setattr(package_module, "has_build", lambda: False)
    monkeypatch.setattr(package_module, "has_wheel", lambda: False)
    result = CliRunner().invoke(spacy_app, ["package", str(tmp_path), str(tmp_path), "--build", "wheel", "--force"])
    assert result.exit_code == 1
    assert "Generating wheels requires 'build'" in result.output and "pip install build" in result.output
    assert list(tmp_path.iterdir()) == []
