"""Resolved recipe → Singularity/Apptainer definition file (.def)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..recipe.model import Copy, Env, ResolvedRecipe, Run
from .common import INDENT, env_assignment, header, run_env_prefix, runscript_lines, step_writer

DOCKER_ENV = ". /.singularity.d/env/10-docker*.sh"


def _section(name: str, lines: list[str]) -> list[str]:
    return ["", f"%{name}", *(INDENT + line if line else "" for line in lines)]


def _run(step: Run) -> list[str]:
    lines = [f"# {step.comment}"] if step.comment else []
    prefix = run_env_prefix(step)
    if prefix:  # a subshell keeps these variables to this step, as RUN does
        return [*lines, "(", INDENT + prefix, *(INDENT + c for c in step.commands), ")"]
    return [*lines, *step.commands]


def _env(step: Env) -> list[str]:
    # one export: sh expands every word before it assigns, so each value reads the variables as they were
    # before the step, as Docker's ENV does
    words = [env_assignment(k, v) for k, v in step.vars]
    return [("export " if n == 0 else INDENT) + word + (" \\" if n < len(words) - 1 else "")
            for n, word in enumerate(words)]


def _copied(step: Copy) -> list[str]:
    return []  # in %files, which apptainer copies before %post runs


# what each step kind adds to %post
POST: dict[type[Any], Callable[[Any], list[str]]] = {Run: _run, Env: _env, Copy: _copied}


def render(recipe: ResolvedRecipe, *, base_override: str | None = None) -> str:
    out = ["Bootstrap: docker", f"From: {base_override or recipe.base_image}", "", *header(recipe, "Definition file")]
    out += _section("labels", [f"{k} {v}" for k, v in recipe.labels])
    copies = [s for s in recipe.steps if isinstance(s, Copy)]
    if copies:
        out += _section("files", [f"{c.context} {c.dest}" for c in copies])
    if recipe.env:  # composed (buildkit.recipe.environment): sourced after the base image's environment
        out += _section("environment", [f"export {env_assignment(k, v)}" for k, v in recipe.env])
    post = ["set -e", "# the base image's Docker environment, as at run time", DOCKER_ENV]
    for step in recipe.steps:
        post += step_writer(POST, step, "Singularity .def")(step)
    out += _section("post", post)
    runscript = runscript_lines(recipe)
    if runscript:
        out += _section("runscript", runscript)
    return "\n".join(out) + "\n"
