"""Resolved recipe → Dockerfile."""

from __future__ import annotations

import json

from ..recipe.model import Copy, Env, ResolvedRecipe, Run
from .common import INDENT, env_assignment, header, run_env_prefix


def _label_value(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def _continued(lines: list[str]) -> str:
    return (" \\\n" + INDENT).join(lines)


def render(recipe: ResolvedRecipe, *, base_override: str | None = None) -> str:
    out = header(recipe, "Dockerfile")
    out += ["", f"FROM {base_override or recipe.base_image}", ""]
    out.append("LABEL " + _continued([f"{k}={_label_value(v)}" for k, v in recipe.labels]))
    for step in recipe.steps:
        out.append("")
        if isinstance(step, Run):
            if step.comment:
                out.append(f"# {step.comment}")
            commands = list(step.commands)
            prefix = run_env_prefix(step)
            if prefix:
                commands = [prefix, *commands]
            out.append("RUN " + (" && \\\n" + INDENT).join(commands))
        elif isinstance(step, Env):
            out.append("ENV " + _continued([env_assignment(k, v) for k, v in step.vars]))
        elif isinstance(step, Copy):
            out.append(f"COPY {json.dumps([step.context, step.dest])}")
    if recipe.entrypoint is not None or recipe.cmd is not None:
        out.append("")
    if recipe.entrypoint is not None:
        out.append(f"ENTRYPOINT {json.dumps(list(recipe.entrypoint))}")
    if recipe.cmd is not None:
        out.append(f"CMD {json.dumps(list(recipe.cmd))}")
    return "\n".join(out) + "\n"
