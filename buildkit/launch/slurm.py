"""The sbatch script of a plan: pure and deterministic (same plan → same bytes)."""

from __future__ import annotations

from .frameworks import glue_for
from .plan import LaunchPlan
from .runtime import image_word, module_lines
from .shell import q_value


def sbatch_options(plan: LaunchPlan) -> list[str]:
    """The ``#SBATCH`` options (values were validated against strict patterns; no shell quoting applies there)."""
    req = plan.request
    opts = [f"--job-name={req.name}"]
    if plan.partition:
        opts.append(f"--partition={plan.partition.name}")
    if req.account:
        opts.append(f"--account={req.account}")
    if req.comment:
        opts.append(f"--comment={req.comment}")
    opts += [f"--nodes={plan.nodes}", f"--ntasks-per-node={plan.tasks_per_node}",
             f"--cpus-per-task={plan.cpus_per_task}"]
    if plan.gpus_per_node:
        opts.append(f"--gres=gpu:{plan.gpus_per_node}")
    if plan.time:
        opts.append(f"--time={plan.time}")
    opts.append(f"--output={req.name}-%j.out")
    return opts


def exported_env(plan: LaunchPlan) -> list[tuple[str, str]]:
    """Site environment, then the user's --env (which wins)."""
    merged = dict(plan.site.env)
    merged.update(dict(plan.env))
    return list(merged.items())


def render_sbatch(plan: LaunchPlan) -> str:
    env = exported_env(plan)
    glue = glue_for(plan, tuple(name for name, _ in env))
    image = plan.image.value if plan.image else "none"
    lines = ["#!/bin/bash", *(f"#SBATCH {o}" for o in sbatch_options(plan)),
             f"# ckit launch: site {plan.site.name}, framework {plan.framework}"
             + (f" ({plan.launcher})" if plan.launcher else "")
             + f", runtime {plan.runtime.kind}, image {image!r}".replace("\n", " "),
             "set -euo pipefail", ""]
    modules = module_lines(plan)
    if modules:
        lines += [*modules, ""]
    if env:
        lines += [f"export {name}={q_value(value)}" for name, value in env] + [""]
    word = image_word(plan)
    if word:
        lines += [f"export CKIT_IMAGE={word}", ""]
    if glue.setup:
        lines += [*glue.setup, ""]
    lines += list(glue.body)
    return "\n".join(lines) + "\n"
