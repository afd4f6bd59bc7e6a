"""The Typer application, its global options and the shared output conventions.

Command modules in :mod:`buildkit.commands` register on :data:`app`. Output rules (docs/CLI.md):
``--json`` prints one JSON document on stdout and nothing else there; messages and progress go to stderr.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

from . import __version__

app = typer.Typer(
    name="ckit",
    help="Deep-learning containers from a recipe to a running multi-node job on HPC clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

stderr = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class Settings:
    """Global options, shared by every command through the Typer context."""

    recipes_dirs: list[Path] = field(default_factory=list)
    sites_dirs: list[Path] = field(default_factory=list)
    debug: bool = False
    quiet: bool = False


SETTINGS = Settings()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ckit {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    recipes: Annotated[list[Path] | None, typer.Option(
        "--recipes", metavar="DIR",
        help="User recipe folder layered over the built-ins (repeatable; also CKIT_RECIPES_PATH).")] = None,
    sites: Annotated[list[Path] | None, typer.Option(
        "--sites", metavar="DIR",
        help="User site folder layered over the built-ins (repeatable; also CKIT_SITES_PATH).")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Verbose logs and full tracebacks.")] = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Only errors on stderr.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    SETTINGS.recipes_dirs = list(recipes or [])
    SETTINGS.sites_dirs = list(sites or [])
    SETTINGS.debug = debug
    SETTINGS.quiet = quiet
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="ckit: %(name)s: %(message)s", stream=sys.stderr)


# Shared option types: one definition each, so every command spells them the same way.
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", metavar="ADDON.PARAM=VALUE", help="Override a recipe parameter (repeatable).")]
NgcOpt = Annotated[str | None, typer.Option("--ngc", metavar="RELEASE", help="NGC release, e.g. 24.06.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan; change nothing.")]


def info(message: str) -> None:
    """A human message on stderr (silenced by --quiet)."""
    if not SETTINGS.quiet:
        stderr.print(message, markup=False)


def warn(message: str) -> None:
    stderr.print(f"warning: {message}", markup=False, style="yellow")


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


@contextmanager
def progress(transfer: bool = False) -> Iterator[Progress]:
    """A progress display on stderr (hidden with --quiet or when stderr is not a terminal)."""
    columns: list[Any] = [TextColumn("{task.description}"), BarColumn()]
    columns += [DownloadColumn(), TransferSpeedColumn()] if transfer else [TextColumn("{task.completed}/{task.total}")]
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=stderr, transient=True,
                  disable=SETTINGS.quiet or not stderr.is_terminal) as bar:
        yield bar
