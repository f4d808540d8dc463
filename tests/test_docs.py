"""The docs cannot drift from the code: the commands of docs/cli.md are the CLI's, the settings table of
docs/configuration.md is the component's config (names and defaults), every part registered with
``registry.misc`` in spacy_pel is documented there and has a ``spacy_misc`` entry point in setup.py
(pointing at the function registered under that name), and benchmarks/README.md indexes every report.

Each checker returns a list of problems; the ``broken`` tests feed it a doc with a row removed or
added and show that it fails.
"""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Dict, List, Set

import pytest
from spacy.language import Language

import spacy_pel  # noqa: F401  (registers the factory)
from spacy_pel.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NAME = re.compile(r"`([^`]+)`")


def table_rows(text: str, header: str) -> List[List[str]]:
    """The cells of the markdown table whose header row starts with ``header`` (``| command |``)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.replace(" ", "").startswith(header.replace(" ", ""))), None)
    if start is None:
        return []
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def first_name(cell: str) -> str:
    found = NAME.search(cell)
    return found.group(1) if found else cell


# ------------------------------------------------------------------ commands
def command_problems(cli_md: str, commands: Set[str]) -> List[str]:
    documented = [first_name(row[0]) for row in table_rows(cli_md, "| command |")]
    problems = [f"docs/cli.md documents `{c}`, which is no command" for c in documented if c not in commands]
    problems += [f"command `{c}` is missing from docs/cli.md" for c in sorted(commands - set(documented))]
    problems += [f"docs/cli.md lists `{c}` twice" for c in sorted({c for c in documented if documented.count(c) > 1})]
    return problems


# ------------------------------------------------------------------ settings
def _default_text(value) -> str:
    if isinstance(value, dict):
        for key in ("@misc", "@scorers"):
            if key in value:
                return value[key]
        return "none" if not value else repr(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def settings_problems(configuration_md: str, default_config: Dict[str, object]) -> List[str]:
    """The table ``| setting | default | meaning |`` must hold the component's config keys, once each,
    with their defaults (a part's default: its registered name; no rules: ``none``)."""
    rows = table_rows(configuration_md, "| setting | default |")
    documented = {first_name(row[0]): row[1].strip("`") for row in rows}
    problems = [f"docs/configuration.md has a setting `{k}` the component does not have" for k in documented if k not in default_config]
    problems += [f"setting `{k}` is missing from docs/configuration.md" for k in default_config if k not in documented]
    for key, value in default_config.items():
        if key in documented and documented[key] != _default_text(value):
            problems.append(f"docs/configuration.md gives `{key}` the default {documented[key]}, the code {_default_text(value)}")
    return problems


def component_config() -> Dict[str, object]:
    return {k: v for k, v in Language.get_factory_meta("pel_linker").default_config.items() if k not in ("nlp", "name")}


# ------------------------------------------------------------------ registered parts
def registered_misc(package: Path = ROOT / "spacy_pel") -> Dict[str, str]:
    """Every ``@registry.misc(NAME)`` (and ``@registry.tokenizers(NAME)``) in the package's source: name →
    ``module:function``."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf8"))
        constants = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                     for t in node.targets if isinstance(t, ast.Name) and isinstance(node.value, ast.Constant)}
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and isinstance(dec.func, ast.Attribute) and dec.func.attr in ("misc", "tokenizers")
                        and dec.args):
                    arg = dec.args[0]
                    name = arg.value if isinstance(arg, ast.Constant) else constants.get(getattr(arg, "id", ""))
                    if isinstance(name, str) and name.startswith("spacy_pel."):
                        found[name] = f"{module}:{node.name}"
    return found


def entry_points(setup_py: str, group: str = "spacy_misc") -> Dict[str, str]:
    """``setup(entry_points={group: ["name = module:function", …]})`` of a setup.py's text."""
    for node in ast.walk(ast.parse(setup_py)):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == group:
                    lines = ast.literal_eval(value)
                    return dict(tuple(part.strip() for part in line.split("=", 1)) for line in lines)
    return {}


def parts_problems(configuration_md: str, setup_py: str, registered: Dict[str, str]) -> List[str]:
    documented = {first_name(row[1]) for row in table_rows(configuration_md, "| part | registered name |")}
    points = {**entry_points(setup_py), **entry_points(setup_py, "spacy_tokenizers")}
    problems = [f"`{n}` ({where}) is not in docs/configuration.md's parts table" for n, where in registered.items() if n not in documented]
    problems += [f"`{n}` ({where}) has no spacy_misc entry point in setup.py" for n, where in registered.items() if n not in points]
    problems += [f"setup.py's entry point `{n}` points at {points[n]}, registered as {registered[n]}"
                 for n in points if n in registered and points[n] != registered[n]]
    problems += [f"setup.py's entry point `{n}` names no registered part" for n in points if n not in registered]
    problems += [f"docs/configuration.md documents `{n}`, which is not registered" for n in documented if n not in registered]
    return problems


# ------------------------------------------------------------------ benchmarks
def benchmark_problems(index_md: str, reports: List[str]) -> List[str]:
    listed = {name for row in table_rows(index_md, "| report |") for name in NAME.findall(row[0])}
    return [f"benchmarks/{r} is not indexed in benchmarks/README.md" for r in reports if r not in listed]


def benchmark_reports() -> List[str]:
    return sorted(p.name for p in (ROOT / "benchmarks").iterdir() if p.suffix in (".md", ".json", ".png") and p.name != "README.md")


# ------------------------------------------------------------------ the docs as they are
def read(path: Path) -> str:
    return path.read_text(encoding="utf8")


def test_documented_commands_are_the_cli_commands():
    assert command_problems(read(DOCS / "cli.md"), set(COMMANDS)) == []


def test_settings_table_is_the_component_config():
    config = component_config()
    assert {"kb", "threshold", "precision", "rules", "nil"} <= set(config)
    assert settings_problems(read(DOCS / "configuration.md"), config) == []


def test_every_registered_part_is_documented_and_has_an_entry_point():
    registered = registered_misc()
    assert len(registered) >= 19 and "spacy_pel.objective.v1" in registered
    assert parts_problems(read(DOCS / "configuration.md"), read(ROOT / "setup.py"), registered) == []
    for name, target in entry_points(read(ROOT / "setup.py")).items():  # each entry point imports
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function)), name


def test_every_benchmark_report_is_indexed():
    assert benchmark_problems(read(ROOT / "benchmarks" / "README.md"), benchmark_reports()) == []


def test_readme_is_short_and_links_existing_docs():
    readme = read(ROOT / "README.md")
    assert len(readme.splitlines()) <= 200
    for target in set(re.findall(r"\]\(((?:docs|benchmarks)/[^)#]+)", readme)):
        assert (ROOT / target).exists(), target


# ------------------------------------------------------------------ the checkers fail on broken docs
def without_row(text: str, needle: str) -> str:
    lines = text.splitlines()
    hit = [i for i, line in enumerate(lines) if line.startswith("|") and needle in line]
    assert hit, needle
    del lines[hit[0]]
    return "\n".join(lines)


def with_row_after(text: str, needle: str, row: str) -> str:
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("|") and needle in line)
    return "\n".join(lines[: i + 1] + [row] + lines[i + 1:])


def test_broken_cli_doc_fails():
    doc = read(DOCS / "cli.md")
    assert command_problems(without_row(doc, "| `build-names` |"), set(COMMANDS)) == ["command `build-names` is missing from docs/cli.md"]
    extra = with_row_after(doc, "| `bulk` |", "| `serve` | a server | |")
    assert command_problems(extra, set(COMMANDS)) == ["docs/cli.md documents `serve`, which is no command"]


def test_broken_settings_table_fails():
    doc, config = read(DOCS / "configuration.md"), component_config()
    assert settings_problems(without_row(doc, "| `precision` |"), config) == ["setting `precision` is missing from docs/configuration.md"]
    stale = doc.replace("| `top_k` | 10 |", "| `top_k` | 5 |")
    assert settings_problems(stale, config) == ["docs/configuration.md gives `top_k` the default 5, the code 10"]
    extra = with_row_after(doc, "| `use_gold_ents` |", "| `fp16` | `false` | gone |")
    assert settings_problems(extra, config) == ["docs/configuration.md has a setting `fp16` the component does not have"]


def test_broken_parts_table_or_entry_points_fail():
    doc, setup_py, registered = read(DOCS / "configuration.md"), read(ROOT / "setup.py"), registered_misc()
    problems = parts_problems(without_row(doc, "`spacy_pel.rules.repeats.v1`"), setup_py, registered)
    assert problems == ["`spacy_pel.rules.repeats.v1` (spacy_pel.pipeline.rules.repeats:repeat_rule) is not in docs/configuration.md's parts table"]
    no_point = "\n".join(line for line in setup_py.splitlines() if "spacy_pel.objective.v1 =" not in line)
    assert parts_problems(doc, no_point, registered) == [
        "`spacy_pel.objective.v1` (spacy_pel.pipeline.updating:make_objective) has no spacy_misc entry point in setup.py"]
    wrong = setup_py.replace("spacy_pel.pipeline.nil:top_score_nil", "spacy_pel.pipeline.nil:classifier_nil")
    assert parts_problems(doc, wrong, registered) == [
        "setup.py's entry point `spacy_pel.nil.top_score.v1` points at spacy_pel.pipeline.nil:classifier_nil, "
        "registered as spacy_pel.pipeline.nil:top_score_nil"]


def test_broken_benchmark_index_fails():
    doc = read(ROOT / "benchmarks" / "README.md")
    assert benchmark_problems(without_row(doc, "| `speed.md`"), benchmark_reports()) == [
        "benchmarks/speed.json is not indexed in benchmarks/README.md", "benchmarks/speed.md is not indexed in benchmarks/README.md"]


@pytest.mark.parametrize("header", ["| command |", "| setting | default |", "| part | registered name |"])
def test_a_missing_table_is_no_table(header):
    assert table_rows("# nothing here\n", header) == []
