"""Resolved recipe → Dockerfile."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..recipe.model import Copy, Env, ResolvedRecipe, Run
from .common import INDENT, env_assignment, header, run_env_prefix, step_writer


def _label_value(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def _continued(lines: list[str]) -> str:
    return (" \\\n" + INDENT).join(lines)


def _run(step: Run) -> list[str]:
    commands = list(step.commands)
    prefix = run_env_prefix(step)
    if prefix:
        commands = [prefix, *commands]
    return ([f"# {step.comment}"] if step.comment else []) + ["RUN " + (" && \\\n" + INDENT).join(commands)]


def _env(step: Env) -> list[str]:
    return ["ENV " + _continued([env_assignment(k, v) for k, v in step.vars])]


def _copy(step: Copy) -> list[str]:
    return [f"COPY {json.dumps([step.context, step.dest])}"]


STEPS: dict[type[Any], Callable[[Any], list[str]]] = {Run: _run, Env: _env, Copy: _copy}


def render(recipe: ResolvedRecipe, *, base_override: str | None = None) -> str:
    """The steps in the recipe's order, then what describes the image: ENTRYPOINT/CMD and, last, the labels.
    The engine caches a step only as long as every instruction before it is unchanged, and the labels change
    with every edit (the fingerprint covers the copied files): after FROM they made an edit rebuild it all."""
    out = header(recipe, "Dockerfile")
    out += ["", f"FROM {base_override or recipe.base_image}"]
    for step in recipe.steps:
        out.append("")
        out += step_writer(STEPS, step, "Dockerfile")(step)
    if recipe.entrypoint is not None or recipe.cmd is not None:
        out.append("")
    if recipe.entrypoint is not None:
        out.append(f"ENTRYPOINT {json.dumps(list(recipe.entrypoint))}")
    if recipe.cmd is not None:
        out.append(f"CMD {json.dumps(list(recipe.cmd))}")
    out += ["", "LABEL " + _continued([f"{k}={_label_value(v)}" for k, v in recipe.labels])]
    return "\n".join(out) + "\n"
