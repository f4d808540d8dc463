"""What the command-line tools print: a command's report as strict JSON on stdout, notes on stderr
(malformed lines left out), and the library's log on stderr while a command runs."""
from __future__ import annotations

import json
import logging
import math
import warnings

import typer


class _EchoHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        warn = record.levelno >= logging.WARNING
        typer.secho(self.format(record), err=True, fg="yellow" if warn else None)


def _echo_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line, ``warning: <message>`` (not Python's ``FILE:LINE: UserWarning: …`` with the
    source line under it, which names a line of typer or spaCy to a user of the command)."""
    typer.secho(f"warning: {message}", err=True, fg="yellow")


class library_log_on_stderr:
    """While a command runs, the library's log (``spacy_pel.*`` loggers: e.g. "resuming…", "starting a
    clean build") goes to stderr, INFO and up, one plain line a record, and so do warnings
    (``warning: …``, once per place as Python's filters say); afterwards both are as they were."""

    def __enter__(self):
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
        return False


def echo_skipped(report: dict) -> None:
    """Tell (on stderr) how many malformed lines were left out, with the first few ``FILE:LINE: reason``."""
    count = report.get("skipped_lines") or 0
    if not count:
        return
    shown = report.get("skipped_examples") or []
    more = f" (first {len(shown)} shown)" if count > len(shown) else ""
    typer.secho(f"skipped {count} malformed line(s){more}:", err=True, fg="yellow")
    for example in shown:
        typer.echo(f"  {example}", err=True)


def strict_json(data):
    """``data`` with NaN and infinite floats as ``None`` (strict JSON: what ``jq`` and ``json.loads`` read)."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: strict_json(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict_json(v) for v in data]
    return data


def echo_json(data) -> None:
    """Print a command's report on stdout as indented strict JSON (:func:`strict_json`)."""
    typer.echo(json.dumps(strict_json(data), indent=2))


def echo_not_linked(report: dict) -> None:
    """Tell (on stderr) how many given mentions were not linked: ``unaligned`` (a boundary inside white space;
    the first few shown), ``overlapping_not_linked`` (a component after the linker reads ``doc.ents``) and
    ``not_linked_by_label`` (no linker links their label)."""
    if report.get("unaligned"):
        shown = "; ".join(report.get("unaligned_examples", [])[:3])
        typer.secho(f"{report['unaligned']} given mention(s) not linked, they cannot be tokens (first: {shown})", fg="yellow", err=True)
    if report.get("overlapping_not_linked"):
        typer.secho(f"{report['overlapping_not_linked']} given mention(s) not linked: they overlap others, and the pipeline has "
                    "a component after pel_linker that reads the entities, so doc.ents only are linked", fg="yellow", err=True)
    other = report.get("not_linked_by_label") or {}
    if other:
        shown = ", ".join(f"{label} {n}" for label, n in sorted(other.items()))
        typer.secho(f"{sum(other.values())} given mention(s) not linked, in no output: no linker of the pipeline links "
                    f"their label ({shown})", fg="yellow", err=True)
