"""Slurm: the sbatch script of a plan (pure, same plan → same bytes), then written and submitted with sbatch."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ...errors import ConfigError
from ...process import which
from .. import runtimes, steps
from ..frameworks import glue_for
from ..model import LaunchPlan
from ..shell import expand_quote, q, q_value
from . import Execution, LaunchResult, SchedulerBackend

MODULE_INIT = (
    "if ! type module >/dev/null 2>&1; then  # a batch shell that is not a login shell may lack it",
    "  for ckit_init in /etc/profile.d/lmod.sh /etc/profile.d/modules.sh /usr/share/lmod/lmod/init/bash \\",
    "      /usr/share/modules/init/bash; do",
    '    # shellcheck source=/dev/null',
    '    if [ -r "${ckit_init}" ]; then . "${ckit_init}"; break; fi',
    "  done",
    "fi",
)


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
    opts.append(f"--output={req.output or f'{req.name}-%j.out'}")
    if req.error:
        opts.append(f"--error={req.error}")
    if req.mail_type:
        opts.append(f"--mail-type={req.mail_type}")
    if req.mail_user:
        opts.append(f"--mail-user={req.mail_user}")
    return opts


def exported_env(plan: LaunchPlan) -> list[tuple[str, str]]:
    """Site environment, then the user's --env (which wins)."""
    merged = dict(plan.site.env)
    merged.update(dict(plan.env))
    return list(merged.items())


def _path_word(value: str) -> str:
    return expand_quote("$HOME" + value[1:]) if value.startswith("~") else q(value)


def environment_lines(plan: LaunchPlan) -> list[str]:
    """Modules (site, --module, the runtime's), then a conda env or a venv; their scripts read unset variables."""
    modules = list(plan.modules) + ([plan.runtime.module] if plan.runtime.module else [])
    if not (modules or plan.conda or plan.venv):
        return []
    lines = ["set +u  # module, conda and venv scripts read unset variables"]
    if modules:
        lines += [*MODULE_INIT, "module purge", "module load " + " ".join(q(m) for m in modules)]
    if plan.conda:
        lines += ['eval "$(conda shell.bash hook)"', f"conda activate {_path_word(plan.conda)}"]
    if plan.venv:
        lines += ["# shellcheck source=/dev/null", f". {_path_word(plan.venv)}/bin/activate"]
    return [*lines, "set -u", ""]


def header(plan: LaunchPlan) -> list[str]:
    image = plan.image.value if plan.image else "none"
    return ["#!/bin/bash", *(f"#SBATCH {o}" for o in sbatch_options(plan)),
            f"# ckit launch: site {plan.site.name}, framework {plan.framework}"
            + (f" ({plan.launcher})" if plan.launcher else "")
            + f", runtime {plan.runtime.kind}, image {image!r}".replace("\n", " "),
            "set -euo pipefail", ""]


def _prologue(plan: LaunchPlan, env: list[tuple[str, str]], setup: tuple[str, ...]) -> list[str]:
    """Exports (first: MODULEPATH may be one), modules and envs, the image, the runtime's setup, --pre lines,
    then ``setup``."""
    runtime = runtimes.REGISTRY.get(plan.runtime.kind, "--runtime")
    body = [f"export {name}={q_value(value)}" for name, value in env] + ([""] if env else [])
    body += environment_lines(plan)
    word = runtime.image_word(plan)
    if word:
        body += [f"export CKIT_IMAGE={word}", ""]
    for lines in (runtime.setup(plan), ("# --pre", *plan.request.pre) if plan.request.pre else (), setup):
        if lines:
            body += [*lines, ""]
    return body


def _fallbacks(text: str) -> list[str]:
    fallbacks = []
    if "${USER}" in text:  # a submit environment without USER (set -u) still has SLURM_JOB_USER
        fallbacks.append('export USER="${USER:-${SLURM_JOB_USER}}"')
    if "${HOME}" in text:
        fallbacks.append('export HOME="${HOME:-$(getent passwd "${SLURM_JOB_USER}" | cut -d : -f 6)}"')
    return [*fallbacks, ""] if fallbacks else []


def render_sbatch(plan: LaunchPlan) -> str:
    env = exported_env(plan)
    glue = glue_for(plan, tuple(name for name, _ in env))
    text = "\n".join(_prologue(plan, env, glue.setup) + list(glue.body))
    return "\n".join(header(plan) + _fallbacks(text)) + "\n" + text + "\n"


SHELL = ("sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; fi; exec sh")


def render_shell(plan: LaunchPlan) -> tuple[list[str], str]:
    """``salloc`` options and the bash text it runs: one task with a terminal, in the image (``ckit shell``)."""
    env = exported_env(plan)
    names = tuple(name for name, _ in env)
    words = [q(a) for a in plan.command]
    step = steps.srun(plan, names, words, options=["--ntasks=1"], tty=True)
    text = "\n".join(["set -euo pipefail", *_prologue(plan, env, ()), step])
    options = [o for o in sbatch_options(plan) if not o.startswith(("--output=", "--error=", "--mail-"))]
    return options, "\n".join(_fallbacks(text)) + text + "\n"


def log_path(pattern: str, job_id: str, name: str, cwd: Path) -> Path | None:
    """The job's log file of sbatch's ``--output`` pattern (%j, %x, %u, %%); None for per-node patterns."""
    if re.search(r"%(?![jxu%])", pattern):
        return None
    user = os.environ.get("USER", "")
    text = re.sub(r"%([jxu%])", lambda m: {"j": job_id, "x": name, "u": user, "%": "%"}[m.group(1)], pattern)
    return cwd / text


class Slurm(SchedulerBackend):
    name = "slurm"
    summary = "an sbatch script, written and submitted"
    order = 10

    def render(self, plan: LaunchPlan) -> str:
        return render_sbatch(plan)

    def execute(self, plan: LaunchPlan, job: str, how: Execution) -> LaunchResult:
        from ..rules import submit_from_violation
        from ..submit import submit, write_script

        result = LaunchResult(plan.site.name, self.name, job, plan.warnings)
        if how.dry_run:
            return result
        if how.wait and not how.submit:
            raise ConfigError("--wait needs --submit", hint="add --submit")
        image = [Path(plan.request.image)] if plan.request.image else []  # the script never replaces the image
        path = write_script(job, how.script or how.cwd / f"{plan.name}.sbatch", inputs=image)
        result.script = str(path)
        if not (how.submit or (how.submit is None and which("sbatch"))):
            return result
        violation = submit_from_violation(plan.site, how.cwd)
        if violation:
            raise violation
        done = submit(path, wait=how.wait, cwd=how.cwd)
        result.job_id, result.exit_code = done.job_id, done.exit_code
        if how.wait:
            log = log_path(plan.request.output or f"{plan.name}-%j.out", done.job_id, plan.name, how.cwd)
            result.output = str(log) if log else None
            from .. import frameworks

            framework = frameworks.REGISTRY.get(plan.framework, "--framework")
            result.extra.update(framework.after_wait(plan, log))
        return result


BACKENDS = (Slurm(),)

