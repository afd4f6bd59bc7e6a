"""Resolved recipe → Singularity/Apptainer definition file (.def)."""

from __future__ import annotations

from ..recipe.model import Copy, Env, ResolvedRecipe, Run
from .common import INDENT, env_assignment, header, run_env_prefix, runscript_lines

DOCKER_ENV = ". /.singularity.d/env/10-docker*.sh"


def _section(name: str, lines: list[str]) -> list[str]:
    return ["", f"%{name}", *(INDENT + line if line else "" for line in lines)]


def render(recipe: ResolvedRecipe, *, base_override: str | None = None) -> str:
    out = ["Bootstrap: docker", f"From: {base_override or recipe.base_image}", "", *header(recipe, "Definition file")]
    out += _section("labels", [f"{k} {v}" for k, v in recipe.labels])
    copies = [s for s in recipe.steps if isinstance(s, Copy)]
    if copies:
        out += _section("files", [f"{c.context} {c.dest}" for c in copies])
    if recipe.env:
        out += _section("environment", [f"export {env_assignment(k, v)}" for k, v in recipe.env])
    post = ["set -e", "# the base image's Docker environment, as at run time", DOCKER_ENV]
    for step in recipe.steps:
        if isinstance(step, Run):
            if step.comment:
                post.append(f"# {step.comment}")
            prefix = run_env_prefix(step)
            if prefix:  # a subshell keeps these variables to this step, as RUN does
                post += ["(", INDENT + prefix, *(INDENT + c for c in step.commands), ")"]
            else:
                post += list(step.commands)
        elif isinstance(step, Env):
            post += [f"export {env_assignment(k, v)}" for k, v in step.vars]
    out += _section("post", post)
    runscript = runscript_lines(recipe)
    if runscript:
        out += _section("runscript", runscript)
    return "\n".join(out) + "\n"
