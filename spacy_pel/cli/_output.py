"""What the command-line tools print: a command's report as strict JSON on stdout, notes on stderr
(malformed lines left out), and the library's log on stderr while a command runs; under any locale, a
character the terminal's encoding lacks prints as ``\\u2192``, never a crash."""
from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Optional

import typer

from ..files import json_text


def echo_color() -> Optional[bool]:
    """``color=`` for ``typer.secho``: False (no colour codes) when ``NO_COLOR`` is set (https://no-color.org) or
    ``TERM=dumb`` (an Emacs shell, a dumb CI console), as rich does for ``--help``; else None (click's rule:
    colour on a terminal, none in a pipe or a file)."""
    return False if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb" else None


class _EchoHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        warn = record.levelno >= logging.WARNING
        typer.secho(self.format(record), err=True, fg="yellow" if warn else None, color=echo_color())


def _echo_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line, ``warning: <message>`` (not Python's ``FILE:LINE: UserWarning: …`` with the
    source line under it, which names a line of typer or spaCy to a user of the command)."""
    typer.secho(f"warning: {message}", err=True, fg="yellow", color=echo_color())


def _escape_unencodable(stream, errors: str = "backslashreplace"):
    """Make ``stream`` (``sys.stdout``/``sys.stderr``) write a character its encoding lacks (``→`` under a
    latin-1 locale) as an escape, not raise UnicodeEncodeError after the work is done; returns its old error
    policy, to restore (None: left as it was, e.g. a stream that cannot be reconfigured)."""
    old = getattr(stream, "errors", None)
    if old is None or old == errors or not hasattr(stream, "reconfigure"):
        return None
    try:
        stream.reconfigure(errors=errors)
    except (ValueError, OSError):  # e.g. a stream that has already been read from or closed
        return None
    return old


class library_log_on_stderr:
    """While a command runs, the library's log (``spacy_pel.*`` loggers: e.g. "resuming…", "starting a
    clean build") goes to stderr, INFO and up, one plain line a record, and so do warnings
    (``warning: …``, once per place as Python's filters say); stdout and stderr escape what their encoding
    cannot show (:func:`_escape_unencodable`); afterwards all are as they were."""

    def __enter__(self):
        self.streams = [(s, _escape_unencodable(s)) for s in (sys.stdout, sys.stderr)]
        self.showwarning = warnings.showwarning
        warnings.showwarning = _echo_warning
        self.logger = logging.getLogger("spacy_pel")
        self.saved = (self.logger.level, self.logger.propagate)
        self.handler = _EchoHandler()
        self.logger.addHandler(self.handler)
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        return self

    def __exit__(self, *exc):
        warnings.showwarning = self.showwarning
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.saved[0])
        self.logger.propagate = self.saved[1]
        for stream, errors in self.streams:
            if errors is not None:
                _escape_unencodable(stream, errors)
        return False


def echo_skipped(report: dict) -> None:
    """Tell (on stderr) how many malformed lines were left out, with the first few ``FILE:LINE: reason``."""
    count = report.get("skipped_lines") or 0
    if not count:
        return
    shown = report.get("skipped_examples") or []
    more = f" (first {len(shown)} shown)" if count > len(shown) else ""
    typer.secho(f"skipped {count} malformed line(s){more}:", err=True, fg="yellow", color=echo_color())
    for example in shown:
        typer.echo(f"  {example}", err=True)


def echo_json(data) -> None:
    """Print a command's report on stdout as indented strict JSON (:func:`spacy_pel.files.json_text`)."""
    typer.echo(json_text(data, indent=2))


def echo_not_linked(report: dict) -> None:
    """Tell (on stderr) how many given mentions were not linked: ``unaligned`` (a boundary inside white space;
    the first few shown), ``overlapping_not_linked`` (a component after the linker reads ``doc.ents``) and
    ``not_linked_by_label`` (no linker links their label)."""
    if report.get("unaligned"):
        shown = "; ".join(report.get("unaligned_examples", [])[:3])
        typer.secho(f"{report['unaligned']} given mention(s) not linked, they cannot be tokens (first: {shown})", fg="yellow", color=echo_color(), err=True)
    if report.get("overlapping_not_linked"):
        typer.secho(f"{report['overlapping_not_linked']} given mention(s) not linked: they overlap others, and the pipeline has "
                    "a component after pel_linker that reads the entities, so doc.ents only are linked", fg="yellow", color=echo_color(), err=True)
    other = report.get("not_linked_by_label") or {}
    if other:
        shown = ", ".join(f"{label} {n}" for label, n in sorted(other.items()))
        typer.secho(f"{sum(other.values())} given mention(s) not linked, in no output: no linker of the pipeline links "
                    f"their label ({shown})", fg="yellow", color=echo_color(), err=True)
