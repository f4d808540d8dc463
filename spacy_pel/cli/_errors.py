"""Expected errors of the command-line tools: one line on stderr and exit status 2, not a traceback.

Wrap a command with :func:`cli_errors`: it adds a ``--verbose`` option (the full traceback, for a bug
report) and turns the errors a user can cause and fix — a malformed input line (``FILE:LINE: reason``),
a missing file, an encoder that does not match the KB, a bad option — into ``error: <message>``.
Anything else is a bug and keeps its traceback. Check options with :func:`require_file` and friends
*before* any heavy work, so a typo costs a second, not an hour of encoding.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

import spacy
import typer
from click.exceptions import UsageError as ClickUsageError
from confection import ConfigValidationError

from ..files import InputError, is_stream, written_through
from ..models.encoder import EncoderMismatchError
from ..retrieval.build import check_encoder_source
from ..retrieval.ray_build import RayOptions
from ._output import echo_color, library_log_on_stderr

EXIT_USAGE = 2  # as click's own usage errors
EXIT_INTERRUPTED = 130
# a bad config value: one line too; an unknown option among spaCy-style config overrides (spaCy's parser raises
# click's own NoSuchOption, which the click inside typer does not catch)
EXPECTED = (InputError, EncoderMismatchError, OSError, ConfigValidationError, ClickUsageError)
# the usage errors of the click typer runs (typer >= 0.24 bundles its own click; before, click's) and of click itself
USAGE_ERRORS = tuple({ClickUsageError, *(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")})
# confection's advice before the reason a config file does not parse (the reason is the line worth showing)
CONFIG_ADVICE = "Make sure the sections and values are formatted correctly."


def one_line(error: BaseException) -> str:
    """The first non-empty line of an error's message (OSErrors name the file; a config error its settings, or
    the reason a file does not parse)."""
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"{error.strerror}: {error.filename}"
    if isinstance(error, ConfigValidationError) and error.errors:  # e.g. an override of a section that does not exist
        where = "; ".join(f"{'.'.join(map(str, e.get('loc', [])))}: {e.get('msg', '')}" for e in error.errors)
        return f"{error.title or 'invalid config'}: {where}"
    if isinstance(error, ConfigValidationError):  # a file that does not parse: the reason, after confection's advice
        why = next((ln.strip() for ln in (error.desc or "").splitlines() if ln.strip() not in ("", CONFIG_ADVICE)), "")
        return f"{error.title or 'invalid config'}: {why}" if why else error.title or "invalid config"
    if isinstance(error, USAGE_ERRORS):
        return f"{error.format_message()} (see --help)"
    text = str(error).strip()
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), type(error).__name__)


def run(app: typer.Typer, args: Optional[Sequence[str]] = None) -> None:
    """Run ``app`` as a program (``python -m spacy_pel …`` and the old ``python -m spacy_pel.<command>`` entry
    points): a usage error — a mistyped or missing option, a value of the wrong type — is one ``error: …`` line
    on stderr and exit status 2, like every other expected error, not typer's usage box; ``--help`` and a
    command given no arguments show the help as before."""
    try:
        code = app(args=args, standalone_mode=False)
    except USAGE_ERRORS as err:
        if type(err).__name__ == "NoArgsIsHelpError":  # the help, shown as typer does (rich prints it on creation)
            message = err.format_message()
            if message and message != "None":
                typer.echo(message, err=True)
        else:
            typer.secho(f"error: {one_line(err)}", err=True, fg="red", color=echo_color())
        sys.exit(EXIT_USAGE)
    except typer.Abort:  # click's end of a prompt on EOF
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def home_expanded(value):
    """A path argument (or a list of them) with a leading ``~`` expanded, as ``--encoder`` is: no shell expands
    ``--output=~/kb``, nor a quoted path in a Makefile; other values, and ``~user`` of no such user, as they are."""
    if isinstance(value, (list, tuple)):
        return type(value)(home_expanded(v) for v in value)
    if not isinstance(value, Path) or not str(value).startswith("~"):
        return value
    try:
        return value.expanduser()
    except RuntimeError:  # no home directory to expand it to
        return value


def fail(message: str) -> None:
    """Stop a command with an expected error (inside a :func:`cli_errors` command)."""
    raise InputError(message)


def cli_errors(command: Callable) -> Callable:
    """Decorate a typer command: expected errors print ``error: …`` and exit 2; ``--verbose`` re-raises; a
    leading ``~`` of its path arguments is expanded (:func:`home_expanded`)."""
    signature = inspect.signature(command)
    verbose = inspect.Parameter(
        "verbose",
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(False, "--verbose", help="Show the full traceback of an error"),
        annotation=bool,
    )

    @functools.wraps(command)
    def wrapper(*args, verbose: bool = False, **kwargs):
        args, kwargs = [home_expanded(a) for a in args], {k: home_expanded(v) for k, v in kwargs.items()}
        try:
            with library_log_on_stderr():
                return command(*args, **kwargs)
        except EXPECTED as err:
            if verbose:
                raise
            typer.secho(f"error: {one_line(err)}", err=True, fg="red", color=echo_color())
            raise typer.Exit(EXIT_USAGE) from None
        except KeyboardInterrupt:
            if verbose:
                raise
            typer.secho("interrupted", err=True, fg="red", color=echo_color())
            raise typer.Exit(EXIT_INTERRUPTED) from None

    wrapper.__signature__ = signature.replace(parameters=[*signature.parameters.values(), verbose])
    wrapper.__annotations__ = {**getattr(command, "__annotations__", {}), "verbose": bool}
    return wrapper


def require_file(path: Optional[Path], what: str) -> None:
    """Refuse a missing input file (``None`` passes: an option not given)."""
    if path is None:
        return
    if not path.exists():
        fail(f"{what} not found: {path}")
    if path.is_dir():
        fail(f"{what} {path} is a folder, not a file")
    if not path.is_file():  # /dev/stdin, <(zcat …), a named pipe: read more than once (hashed, then read)
        fail(f"{what} {path} is a pipe or device, not a file: save it to a file first and give that")


def require_dir(path: Optional[Path], what: str, marker: Optional[str] = None) -> None:
    """Refuse a missing folder, or one without ``marker`` (e.g. ``meta.json`` of a KB folder)."""
    if path is None:
        return
    if not path.exists():
        installed = " (nor an installed pipeline package's name)" if what == "pipeline" else ""
        fail(f"{what} not found: {path}{installed}")
    if not path.is_dir():
        fail(f"{what} {path} is a file, not a folder")
    if marker and not (path / marker).exists():
        fail(f"{what} {path} has no {marker}: is it the right folder?")


PIPELINE_HELP = "A saved spaCy pipeline with pel_linker: its folder, or the name of an installed pipeline package"


def pipeline_folder(value: Optional[Path]) -> Optional[Path]:
    """A ``--pipeline`` value as a folder (a typer callback): for the name of an installed pipeline package
    (``spacy package``'s, e.g. ``en_pel_bc5cdr_mesh``) the folder in it that ``spacy.load`` reads (before a
    folder of that name here, as ``spacy.load`` does), else the value itself (a folder, or for
    :func:`require_dir` to name)."""
    name = str(value) if value is not None else ""
    if value is None or not spacy.util.is_package(name):  # an installed package first, as spacy.load takes it
        return value
    try:
        root = spacy.util.get_package_path(name)
        meta = spacy.util.get_model_meta(root)
        folder = root / f"{meta['lang']}_{meta['name']}-{meta['version']}"
    except (ImportError, OSError, ValueError, KeyError):  # an installed package, but not a spaCy pipeline's
        return value
    return folder if (folder / "config.cfg").is_file() else value


def require_pipeline_or_kb(pipeline: Optional[Path], kb: Optional[Path], encoder: Optional[str] = None) -> None:
    """The commands that link take a saved pipeline or a KB folder (with an encoder): one of them, and each a
    real folder. A pipeline links with its own KB and encoder, so neither is taken beside it."""
    if pipeline is None and kb is None:
        fail("give --pipeline or --kb")
    if pipeline is not None and kb is not None:
        fail("give --pipeline or --kb, not both: a pipeline links against its own KB (python -m spacy_pel retarget "
             "gives it another)")
    if pipeline is not None and encoder is not None:
        fail("--encoder goes with --kb: a pipeline links with its own encoder")
    require_dir(pipeline, "pipeline", "config.cfg")
    require_dir(kb, "KB folder", "meta.json")
    if encoder is not None:
        check_encoder_source(encoder)


def require_one_of(value: str, choices: Iterable[str], option: str) -> None:
    choices = list(choices)
    if value not in choices:
        fail(f"{option} {value!r} is not one of {', '.join(choices)}")


def require_not_input(output: Optional[Path], inputs: Iterable[Optional[Path]], what: str = "output") -> None:
    """Refuse an output that is one of the command's inputs (the same file by another path too): writing it
    would replace what the command reads, often before the command fails (``None``s are options not given)."""
    if output is None:
        return
    if any(path is not None and output.resolve() == path.resolve() for path in inputs):
        fail(f"{what} {output} is one of the inputs; give another file name")


def require_writable_parent(path: Path, what: str) -> None:
    """Refuse an output whose place cannot be made: its parent is a file, or a folder this user cannot write
    in (a read-only mount, no permission; through a symlink: its target's). A stream (/dev/stdout) is written."""
    if is_stream(path):
        return
    for parent in written_through(path).parents:
        if parent.exists():
            if not parent.is_dir():
                fail(f"cannot write {what} {path}: {parent} is a file")
            if not os.access(parent, os.W_OK | os.X_OK):
                fail(f"cannot write {what} {path}: {parent} is not writable (a read-only file system, or no permission)")
            return


def require_output_file(path: Path, what: str) -> None:
    """Refuse an output *file* whose place cannot be made (:func:`require_writable_parent`) or that is an
    existing folder, before any work (the write would fail only at the end, naming its temporary file).
    Outputs that are folders (a pipeline, an encoder, a KB) take :func:`require_writable_parent` alone."""
    require_writable_parent(path, what)
    if path.is_dir():
        fail(f"cannot write {what} {path}: it is a folder, not a file")


def ray_options(ray: bool, address: Optional[str], workers: Optional[int], cpus_per_worker: int) -> Optional[RayOptions]:
    """``--ray [--address] [--workers] [--cpus-per-worker]`` of the build commands (None: a local build)."""
    if not ray:
        if address is not None or workers is not None or cpus_per_worker != 1:
            fail("--address, --workers and --cpus-per-worker go with --ray")
        return None
    return RayOptions(address=address, workers=workers, cpus_per_worker=cpus_per_worker)
