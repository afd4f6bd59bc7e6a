"""Pieces both renderers share, so that both formats say the same thing."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .. import __version__
from ..errors import BuildError
from ..recipe.model import ResolvedRecipe, Run, Step

T = TypeVar("T")

INDENT = "    "


def header(recipe: ResolvedRecipe, what: str) -> list[str]:
    lines = [f"# {what} for stack {recipe.stack}, written by ckit {__version__}.",
             "# Generated from the recipe: change the recipe (or --set) rather than this file."]
    if recipe.seed:
        lines.append(f"# Reproduces: {recipe.seed}")
    return lines


def env_assignment(name: str, value: str) -> str:
    """``NAME="value"``. Values were validated when the recipe was resolved: no quotes, backslashes, backticks
    or newlines, and ``$`` only as a variable reference, so double quotes keep their meaning in sh and Docker."""
    return f'{name}="{value}"'


def run_env_prefix(step: Run) -> str:
    """``export A="x" B="y"`` for a run step's own variables ('' when it has none)."""
    if not step.env:
        return ""
    return "export " + " ".join(env_assignment(k, v) for k, v in step.env)


def exec_words(words: tuple[str, ...]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def runscript_lines(recipe: ResolvedRecipe) -> list[str]:
    """Shell lines with the same meaning as Docker's ENTRYPOINT + CMD (arguments replace CMD)."""
    if recipe.entrypoint is None and recipe.cmd is None:
        return []
    lines = []
    if recipe.cmd:
        lines.append(f'if [ "$#" -eq 0 ]; then set -- {exec_words(recipe.cmd)}; fi')
    entry = exec_words(recipe.entrypoint or ())
    lines.append(f'exec {entry} "$@"' if entry else 'exec "$@"')
    return lines


def step_writer(writers: Mapping[type[Any], Callable[[Any], T]], step: Step, what: str) -> Callable[[Any], T]:
    """The renderer's writer for this kind of step; a step kind it does not know is an error, never skipped
    (a step left out of one format would build a different image from the other)."""
    writer = writers.get(type(step))
    if writer is None:
        raise BuildError(f"the {what} renderer cannot write a {type(step).__name__} step",
                         hint="each step kind needs a writer in every renderer (buildkit/render/)")
    return writer
