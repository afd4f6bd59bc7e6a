"""Resolved recipe → Dockerfile."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
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


def _command(recipe: ResolvedRecipe) -> list[str]:
    lines = []
    if recipe.entrypoint is not None:
        lines.append(f"ENTRYPOINT {json.dumps(list(recipe.entrypoint))}")
    if recipe.cmd is not None:
        lines.append(f"CMD {json.dumps(list(recipe.cmd))}")
    return lines


def render(recipe: ResolvedRecipe, *, base_override: str | None = None) -> str:
    """The steps in the recipe's order; ENTRYPOINT/CMD after the last RUN step; the labels last.

    The engine re-runs a step when it or any instruction before it changed, so what changes most goes last where
    its place means nothing: the labels change with every edit (the fingerprint covers the copied files; after
    FROM they made an edit rebuild it all), and no build step reads ENTRYPOINT or CMD, so they sit where editing
    them re-runs no command and editing the files copied after the last RUN step does not write them again."""
    steps = [step_writer(STEPS, step, "Dockerfile")(step) for step in recipe.steps]
    last_run = max((n for n, step in enumerate(recipe.steps) if isinstance(step, Run)), default=-1)
    command = _command(recipe)
    if command:
        steps.insert(last_run + 1, command)
    out = header(recipe, "Dockerfile")
    out += ["", f"FROM {base_override or recipe.base_image}"]
    for lines in steps:
        out += ["", *lines]
    out += ["", "LABEL " + _continued([f"{k}={_label_value(v)}" for k, v in recipe.labels])]
    return "\n".join(out) + "\n"


def add_labels(text: str, labels: Mapping[str, str]) -> str | None:
    """The Dockerfile ``text`` with ``labels`` added to its last instruction when that is a LABEL (as :func:`render`
    ends), else None. An engine given labels apart from the Dockerfile makes each a step of its own: added here,
    the labels a build adds (its build key) cost no step after an edit."""
    lines = text.rstrip("\n").split("\n")
    last = next((line for line in reversed(lines) if line.strip() and not line.startswith((INDENT, "#"))), "")
    if not last.startswith("LABEL "):
        return None
    return "\n".join(lines) + "".join(f" \\\n{INDENT}{k}={_label_value(v)}" for k, v in labels.items()) + "\n"
