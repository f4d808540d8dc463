"""The packaged pipeline as a wheel (issue 32 item 7): built as ``spacy project run package`` builds it,
installed offline into a fresh virtualenv, loaded there by its package name.

    python benchmarks/package.py --pipeline training/pipeline_calibrated [--dev corpus/bc5cdr_dev.spacy]
        [--name pel_bc5cdr_mesh] [--version 0.1.0] [--work /tmp/pel_package] [--out benchmarks/package]

1. project.yml's ``package`` lines, rendered by weasel with ``--vars.package_name NAME
   --vars.package_version VERSION``, the pipeline folder and ``packages`` replaced by ``--pipeline``
   and ``WORK/packages``, run one after the other from the repository root and timed: the spacy_pel
   wheel (``pip wheel .``), then the pipeline's (``spacy package --build wheel``).
2. Sizes: the pipeline folder, the two wheels, and what ``WORK/packages`` holds on disk afterwards.
3. A fresh virtualenv (``--system-site-packages --without-pip``: torch, spaCy and the rest come from
   this machine, nothing is downloaded; the machine's pip installs into it), and one ``pip install
   --no-index --find-links WORK/wheels`` of both wheels with the machine's pip settings switched off
   (offline), timed; the size of what it installed.
4. In the venv: ``spacy.load(NAME)`` timed, and the first document of ``--dev`` linked from its gold
   mentions (labels kept, KB ids removed); the same document linked by ``--pipeline`` with this
   machine's Python: the KB ids compared mention by mention.

Writes ``--out``.md and ``--out``.json (benchmarks/package.md, .json). Needs ``pip install -e
".[package]"``. Disk: about three times the pipeline folder under WORK (the copy ``spacy package``
makes, setuptools' ``build/``, the wheel) plus the installed copy; WORK is left in place for a look,
and emptied at the start of each run.
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import typer
from weasel.util import load_project_config, parse_config_overrides

from _common import ROOT, cpu_seconds, lscpu_model, machine, others_busy

LINK = """
import json, sys, time
import spacy, spacy_pel
from spacy.tokens import Span
from spacy.util import filter_spans
from spacy_pel.corpora import bare_doc, gold_spans, read_docbin
t = time.perf_counter()
nlp = spacy.load(sys.argv[1])
load_s = time.perf_counter() - t
gold = read_docbin(nlp, sys.argv[2])[0]
doc = bare_doc(gold, nlp.vocab)
doc.ents = filter_spans([Span(doc, s.start, s.end, label=s.label_) for s in gold_spans(gold)])
doc = nlp(doc)
print(json.dumps({"prefix": sys.prefix, "spacy_pel": spacy_pel.__file__, "pipeline": str(nlp.path), "load_s": load_s,
                  "doc": gold.user_data.get("pmid", ""), "ents": [[e.start_char, e.end_char, e.text, e.kb_id_] for e in doc.ents]}))
"""


def package_script(name: str, version: str, pipeline: Path, packages: Path) -> list:
    """project.yml's ``package`` lines with this run's vars, pipeline and packages folder (argv lists)."""
    overrides = parse_config_overrides(["--vars.package_name", name, "--vars.package_version", version])
    (command,) = [c for c in load_project_config(ROOT, overrides=overrides)["commands"] if c["name"] == "package"]
    lines = []
    for line in command["script"]:
        words = shlex.split(line)
        moved = {"training/pipeline_calibrated": str(pipeline), "packages": str(packages)}
        words = [moved.get(w, str(packages / w[len("packages/"):]) if w.startswith("packages/") else w) for w in words]
        lines.append([sys.executable] + words[1:])
    return lines


def timed(argv, **kwargs) -> dict:
    """Run ``argv`` (failing loudly); wall seconds, CPU seconds of the command, cores others kept busy."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    seconds, c1 = time.perf_counter() - t0, cpu_seconds()
    if done.returncode != 0:
        sys.exit(f"failed: {shlex.join(map(str, argv))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return {"s": round(seconds, 1), "cpu_s": round(c1[1] - c0[1], 1), "others_busy": others_busy(c0, c1, seconds),
            "stdout": done.stdout}


def size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def mb(n: int) -> str:
    return f"{n / 1e6:,.1f}"


def offline_env() -> dict:
    """This environment without the machine's pip settings (index, find-links, config file)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def main(
    pipeline: Path = typer.Option(..., "--pipeline", help="The pipeline folder to package"),
    dev: Path = typer.Option(ROOT / "corpus" / "bc5cdr_dev.spacy", "--dev", help="Documents linked by both installs"),
    name: str = typer.Option("pel_bc5cdr_mesh", "--name", help="Package name (en_NAME)"),
    version: str = typer.Option("0.1.0", "--version"),
    work: Path = typer.Option(Path("/tmp/pel_package"), "--work", help="Scratch folder (replaced)"),
    out: Path = typer.Option(ROOT / "benchmarks" / "package", "--out", help="Report stem: writes OUT.json and OUT.md"),
) -> None:
    given = {"pipeline": str(pipeline), "dev": str(dev)}
    pipeline, dev, work = pipeline.resolve(), dev.resolve(), work.resolve()
    package = f"en_{name}"
    shutil.rmtree(work, ignore_errors=True)
    packages, wheels, venv = work / "packages", work / "wheels", work / "venv"
    packages.mkdir(parents=True)

    steps = {}
    for key, argv in zip(("spacy_pel_wheel", "pipeline_wheel"), package_script(name, version, pipeline, packages)):
        steps[key] = timed(argv, cwd=ROOT)
    (spacy_pel_wheel,) = (packages / "wheels").glob("spacy_pel-*.whl")
    dist = packages / f"{package}-{version}" / "dist"
    built = sorted(p.name for p in dist.iterdir())
    pipeline_wheel = dist / f"{package}-{version}-py3-none-any.whl"
    if built != [pipeline_wheel.name]:
        sys.exit(f"expected one wheel in {dist}, found {built}")
    wheels.mkdir()
    for wheel in (spacy_pel_wheel, pipeline_wheel):
        shutil.copy(wheel, wheels)

    steps["venv"] = timed([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    venv_before = size(venv)
    steps["install"] = timed([python, "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
                              str(wheels / spacy_pel_wheel.name), str(wheels / pipeline_wheel.name)], cwd=work, env=offline_env())
    installed = size(venv) - venv_before
    steps["load_and_link_venv"] = timed([python, "-c", LINK, package, str(dev)], cwd=work, env=offline_env())
    steps["load_and_link_source"] = timed([sys.executable, "-c", LINK, str(pipeline), str(dev)], cwd=work,
                                          env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    in_venv = json.loads(steps["load_and_link_venv"]["stdout"].splitlines()[-1])
    source = json.loads(steps["load_and_link_source"]["stdout"].splitlines()[-1])
    from_venv = all(Path(in_venv[k]).resolve().is_relative_to(venv.resolve()) for k in ("prefix", "spacy_pel", "pipeline"))
    same = in_venv["ents"] == source["ents"]
    for step in steps.values():
        step.pop("stdout")

    report = {
        "pipeline": given["pipeline"], "name": package, "version": version, "dev": given["dev"],
        "machine": {**machine(), "lscpu_model": lscpu_model()}, "steps": steps,
        "bytes": {"pipeline_folder": size(pipeline), "spacy_pel_wheel": size(spacy_pel_wheel),
                  "pipeline_wheel": size(pipeline_wheel), "packages_folder": size(packages), "installed": installed},
        "load_s": {"venv": round(in_venv["load_s"], 1), "source": round(source["load_s"], 1)},
        "loaded_from_venv": from_venv, "doc": source["doc"], "mentions": len(source["ents"]),
        "linked": sum(1 for e in source["ents"] if e[3]), "same_kb_ids": same,
        "ents": {"venv": in_venv["ents"], "source": source["ents"]},
    }
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    out.with_suffix(".md").write_text(markdown(report), encoding="utf8")
    print(markdown(report))
    if not (same and from_venv):
        sys.exit("the installed pipeline did not link as the source pipeline (see the report)")


def markdown(r: dict) -> str:
    b, s, m = r["bytes"], r["steps"], r["machine"]
    yes = {True: "yes", False: "**no**"}
    rows = [("the spacy_pel wheel (`pip wheel . --no-deps --no-build-isolation`)", s["spacy_pel_wheel"]),
            ("the pipeline wheel (`spacy package --build wheel`)", s["pipeline_wheel"]),
            ("a fresh venv (`--system-site-packages --without-pip`)", s["venv"]),
            ("**install**: `pip install --no-index --find-links` both wheels", s["install"]),
            (f"`spacy.load('{r['name']}')` + one document, in the venv", s["load_and_link_venv"]),
            ("the same from the source folder", s["load_and_link_source"])]
    lines = [
        f"# The packaged pipeline as a wheel: `{r['name']}`",
        "",
        f"Written by `python benchmarks/package.py --pipeline {r['pipeline']}` (issue 32 item 7). project.yml's",
        "`package` lines built the two wheels; a fresh virtualenv that sees this machine's packages (torch,",
        "spaCy: nothing downloaded) installed them with one offline pip command (`--no-index`, the machine's",
        "pip settings off), then loaded the pipeline by its package name and linked the first document of",
        f"`{r['dev']}` from its gold mentions, as the source folder does.",
        "",
        f"Machine: {m.get('lscpu_model') or m['cpu']}, torch {m['torch']}, Python {m['python']}; a shared machine, one run:",
        "wall seconds move with the other jobs (the `others busy` column: cores they kept busy meanwhile),",
        "CPU seconds less so.",
        "",
        "| size | MB |",
        "|---|---|",
        f"| the pipeline folder (`{r['pipeline']}`) | {mb(b['pipeline_folder'])} |",
        f"| the pipeline wheel (`{r['name']}-{r['version']}-py3-none-any.whl`) | {mb(b['pipeline_wheel'])} |",
        f"| the spacy_pel wheel | {mb(b['spacy_pel_wheel'])} |",
        f"| `packages/` after the build (the copy `spacy package` makes, setuptools' `build/`, the wheel) | {mb(b['packages_folder'])} |",
        f"| installed into the venv (both packages) | {mb(b['installed'])} |",
        "",
        "| step | wall s | CPU s | others busy |",
        "|---|---|---|---|",
    ]
    lines += [f"| {label} | {step['s']} | {step['cpu_s']} | {step['others_busy']} |" for label, step in rows]
    lines += [
        "",
        f"`spacy.load` alone: {r['load_s']['venv']} s in the venv, {r['load_s']['source']} s from the source folder.",
        f"Loaded from the venv's own site-packages (spacy_pel and the pipeline, not the checkout): {yes[r['loaded_from_venv']]}.",
        f"Document {r['doc']}: {r['mentions']} mentions, {r['linked']} linked to an entity; the same KB ids as the source "
        f"pipeline, mention by mention: {yes[r['same_kb_ids']]}.",
        "",
        "Before (issue 32, item 7): the command made a 903 MB sdist, and `pip install` spent 170 s of the",
        "install building it into a wheel. `tests/test_package_wheel.py` checks the same route on a tiny pipeline.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    typer.run(main)
