"""The Typer application, its global options and the shared output conventions.

Command modules in :mod:`buildkit.commands` register on :data:`app`. Output rules (the README, "Commands"):
``--json`` prints one JSON document on stdout and nothing else there; messages and progress go to stderr.
Human output goes through :func:`say`, :func:`info` and :func:`warn`, which show outside text with its control
characters escaped (:func:`buildkit.outside.shown`), as do usage errors and log lines.
Settings and progress go down to the layers below as arguments (``SETTINGS.recipes_dirs``, a
:class:`~buildkit.progress.Reporter` from :func:`progress`): nothing below the CLI imports this module.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup

from .. import __version__
from ..api._cli import STORE_MAX_SIZE
from ..outside import ascii_float, ascii_int, shown
from .flags import hoist_global_flags
from .usage import ARGV_KEY, is_usage_error, reword

if TYPE_CHECKING:
    from ..api._cli import UserConfig
    from .progress_bars import RichReporter


@contextmanager
def _shown_usage_errors(ctx: Any) -> Iterator[None]:
    """A usage error quotes what was typed (``No such command '…'``): shown escaped, like any outside text
    (typer's own escaping leaves out bidi overrides). A subcommand's errors pass through the group's invoke.
    A usage error is worded as ckit words every error, with a hint that works when pasted (:mod:`.usage`)."""
    try:
        yield
    except typer.TyperException as err:
        if is_usage_error(err):
            reword(err, ctx)
        err.message = shown(err.message, lines=True)
        raise


class _Group(TyperGroup):
    """``-q/--quiet`` and ``--debug`` are accepted anywhere before ``--``, as users of sbatch and git expect."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta.setdefault(ARGV_KEY, list(args))  # what the user typed: the hints correct it
        SETTINGS.commands = tuple(self.commands)
        with _shown_usage_errors(ctx):
            return super().parse_args(ctx, hoist_global_flags(args, self))

    def invoke(self, ctx: Any) -> Any:
        with _shown_usage_errors(ctx):
            return super().invoke(ctx)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        from typer.completion import completion_init  # type: ignore[attr-defined]

        completion_init()  # the protocol the scripts of `ckit completion` speak (typer's, not click's)
        return super().main(*args, **kwargs)


app = typer.Typer(
    name="ckit",
    cls=_Group,
    help="Deep-learning containers from a recipe to a running multi-node job on HPC clusters.",
    no_args_is_help=True,
    add_completion=False,  # ckit's own options below: they also find the shell from $SHELL
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

stderr = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class Settings:
    """Global options and the user's defaults, read by the command modules and passed down as arguments."""

    recipes_dirs: list[Path] = field(default_factory=list)
    sites_dirs: list[Path] = field(default_factory=list)
    debug: bool = False
    quiet: bool = False
    given: list[str] = field(default_factory=list)  # --recipes/--sites as typed: the hints' commands repeat them
    commands: tuple[str, ...] = ()
    config: UserConfig | None = None  # flag > environment > config file > default (``ckit config show``)
    store_max_size: int = STORE_MAX_SIZE  # bytes: the personal store's cap (store.max_size, CKIT_STORE_MAX_SIZE)


SETTINGS = Settings()


def pasteable(text: str) -> str:
    """``text`` with the ``ckit COMMAND`` lines it quotes given this line's --recipes/--sites folders, so a hint
    works when pasted (``ckit lock mine`` finds the stack ``mine`` only in the folder it was read from)."""
    if not SETTINGS.given or not SETTINGS.commands:
        return text
    import re
    import shlex

    names = "|".join(re.escape(name) for name in sorted(SETTINGS.commands, key=len, reverse=True))
    return re.sub(rf"(?<![\w/.-])ckit (?=(?:{names})(?![\w-]))", lambda _: f"ckit {shlex.join(SETTINGS.given)} ",
                  text)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ckit {__version__}")
        raise typer.Exit()


def _install_completion(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from .shells import install

        shell, path = install()
        typer.echo(f"{shell} completion installed in {path}; it takes effect in a new {shell}")
        raise typer.Exit()


def _show_completion(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from .shells import current, script

        typer.echo(script(current()))
        raise typer.Exit()


@app.callback()
def _global(
    recipes: Annotated[list[Path] | None, typer.Option(
        "--recipes", metavar="DIR",
        help="User recipe folder layered over the built-ins (repeatable; also CKIT_RECIPES_PATH).")] = None,
    sites: Annotated[list[Path] | None, typer.Option(
        "--sites", metavar="DIR",
        help="User site folder layered over the built-ins (repeatable; also CKIT_SITES_PATH).")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Verbose logs and full tracebacks (anywhere on the line).")
                     ] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Only errors on stderr (anywhere on the line).")
                     ] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    install_completion: Annotated[bool, typer.Option(
        "--install-completion", callback=_install_completion, is_eager=True,
        help="Install completion for the shell ckit runs in (else $SHELL's) and exit.")] = False,
    show_completion: Annotated[bool, typer.Option(
        "--show-completion", callback=_show_completion, is_eager=True,
        help="Print the completion script for that shell and exit.")] = False,
) -> None:
    from ..api._cli import load_settings

    SETTINGS.config = load_settings(flags={"recipes": recipes or [], "sites": sites or []})
    SETTINGS.recipes_dirs = list(SETTINGS.config.folders("recipes"))
    SETTINGS.sites_dirs = list(SETTINGS.config.folders("sites"))
    SETTINGS.store_max_size = SETTINGS.config.store_max_size
    SETTINGS.given = [word for flag, folders in (("--recipes", recipes), ("--sites", sites))
                      for folder in folders or () for word in (flag, str(folder))]
    SETTINGS.debug = debug
    SETTINGS.quiet = quiet
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_ShownFormatter("ckit: %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, handlers=[handler])


class _ShownFormatter(logging.Formatter):
    """Log lines quote layer names, paths and engine output: shown escaped, as every human line is."""

    def format(self, record: logging.LogRecord) -> str:
        return shown(super().format(record), lines=True)


def whole_number(text: str) -> int:
    """An option's whole number, in ASCII digits only (``parser=`` of every integer option): click's own type
    takes ``int()``'s word, which accepts ``٣``, ``３`` and ``1_0``."""
    number = ascii_int(text, signed=True) if isinstance(text, str) else text
    if number is None:
        raise typer.BadParameter(f"{text!r} is not a whole number in ASCII digits (0-9)")
    return number


def number(text: str) -> float:
    """An option's number (``1``, ``0.5``, ``2e3``) in ASCII digits only (``parser=`` of every such option)."""
    value = ascii_float(text) if isinstance(text, str) else text
    if value is None:
        raise typer.BadParameter(f"{text!r} is not a number in ASCII digits (0-9)")
    return value


# Shared option types: one definition each, so every command spells them the same way.
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", metavar="ADDON.PARAM=VALUE", help="Override a recipe parameter (repeatable).")]
NgcOpt = Annotated[str | None, typer.Option("--ngc", metavar="RELEASE", help="NGC release, e.g. 24.06.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")]


def _complete_stack(incomplete: str) -> list[str]:
    """Stack names for shell completion (the built-ins and CKIT_RECIPES_PATH; --recipes is not parsed yet)."""
    from ..api._cli import Catalog

    try:
        return [name for name in Catalog.from_dirs().stack_names() if name.startswith(incomplete)]
    except Exception:  # completion must never print a traceback into the user's shell
        return []


StackArg = Annotated[str, typer.Argument(metavar="STACK", help="Stack name (see `ckit recipes`).",
                                         autocompletion=_complete_stack)]


def complete_site(incomplete: str) -> list[str]:
    """Site names for shell completion (the built-ins and CKIT_SITES_PATH)."""
    from ..api._cli import list_sites

    try:
        return [site.name for site in list_sites() if site.name.startswith(incomplete)]
    except Exception:  # completion must never print a traceback into the user's shell
        return []


def info(message: str) -> None:
    """A human message on stderr (silenced by --quiet)."""
    if not SETTINGS.quiet:
        stderr.print(shown(pasteable(message), lines=True), markup=False)


def warn(message: str) -> None:
    stderr.print(f"warning: {shown(pasteable(message), lines=True)}", markup=False, style="yellow")


def say(text: str | bytes, *, nl: bool = True) -> None:
    """Human output on stdout (a table, a path, a job script with --dry-run, a job's log): outside text in it
    shown escaped, on a terminal or not (the exact bytes are in the files ckit writes, and in --json)."""
    value = text.decode("utf-8", "surrogateescape") if isinstance(text, bytes) else text
    typer.echo(shown(value, lines=True), nl=nl)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def emit_plan(plan: Any, as_json: bool) -> None:
    """What ``--dry-run`` prints: the plan as ``{"plan": …}`` with ``--json``, else its description."""
    if as_json:
        emit_json({"plan": plan.as_json()})
    else:
        say(plan.describe(), nl=False)


@contextmanager
def progress() -> Iterator[RichReporter]:
    """One progress display on stderr for the whole command (hidden with --quiet or when stderr is not a
    terminal): bars with rate and ETA where the total is known, a spinner where it is not."""
    from .progress_bars import live_reporter

    with live_reporter(stderr, enabled=not SETTINGS.quiet and stderr.is_terminal) as reporter:
        yield reporter
