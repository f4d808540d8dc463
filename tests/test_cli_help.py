"""``--help`` is written for users: each command's help is its module's ``HELP`` (plain text, no Sphinx roles or
RST markup, an ``Example:`` line), the command list shows each command's first sentence, and the old
``python -m spacy_pel.<module>`` entry points (the cli modules' own apps) show the same help."""
from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from spacy_pel.cli import COMMANDS, app

ANSI = re.compile(r"\x1b\[[0-9;]*m")
BOX = re.compile(r"[│╭╮╰╯─]")
ROLE = re.compile(r":(mod|func|class|meth|data|attr):")
FIRST_SENTENCE = re.compile(r"(.+?\.)(?:\s|$)", re.S)


def flat(text: str) -> str:
    """Rendered help as one line: colours, panel borders and rich's wrapping removed."""
    return " ".join(BOX.sub(" ", ANSI.sub("", text)).split())


def first_sentence(help_text: str) -> str:
    found = FIRST_SENTENCE.match(help_text.split("\n\n", 1)[0])
    assert found, help_text
    return found.group(1)


def show_help(typer_app, args) -> str:
    result = CliRunner().invoke(typer_app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_text_is_plain_and_short(name):
    text = COMMANDS[name].HELP
    summary = first_sentence(text)
    assert len(summary) <= 90, summary
    paragraphs = text.split("\n\n")
    assert all("\n" not in p for p in paragraphs), "hard line break inside a paragraph"
    assert 2 <= len(paragraphs) <= 4
    assert paragraphs[-1].startswith(f"Example: python -m spacy_pel {name} ")
    for banned in ("``", "SPEC", "session", "spacy_pel.", "benchmarks/", "["):
        assert banned not in text, banned
    assert not ROLE.search(text)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_command_help(name):
    text = show_help(app, [name])
    assert not ROLE.search(text) and "``" not in text
    shown = flat(text)
    assert flat(first_sentence(COMMANDS[name].HELP)) in shown
    assert f"Example: python -m spacy_pel {name} " in shown


@pytest.mark.parametrize("name", list(COMMANDS))
def test_old_entry_point_help(name):
    """``python -m spacy_pel.calibrate`` and the like run the cli module's own one-command app."""
    shown = flat(show_help(COMMANDS[name].app, []))
    assert flat(first_sentence(COMMANDS[name].HELP)) in shown
    assert f"Example: python -m spacy_pel {name} " in shown


def test_top_level_help_lists_every_command_with_its_first_sentence():
    text = show_help(app, [])
    assert "tests call the library functions" not in text
    assert not ROLE.search(text) and "``" not in text
    shown = flat(text)
    assert "python -m spacy_pel COMMAND --help" in shown and "spacy project run all" in shown
    for name, module in COMMANDS.items():
        assert f" {name} {flat(first_sentence(module.HELP))}" in shown, name


@pytest.mark.parametrize("name", list(COMMANDS))
def test_example_uses_only_the_command_s_own_options(name):
    """Each option in the Example line is one the command has (or, for a command that takes config
    overrides, a ``--section.key``), so an option renamed or removed fails here, not in a user's terminal."""
    module = COMMANDS[name]
    example = module.HELP.split("\n\n")[-1].split(f"python -m spacy_pel {name} ", 1)[1]
    command = module.app.registered_commands[0]
    params = typer.main.get_command(module.app).params
    known = {opt for p in params for opt in (*p.opts, *p.secondary_opts)}
    takes_overrides = bool((command.context_settings or {}).get("allow_extra_args"))
    for option in re.findall(r"(?<!\S)(--?[A-Za-z][\w.-]*)", example):
        assert option in known or (takes_overrides and "." in option), f"{name}: {option} is not an option of the command"
