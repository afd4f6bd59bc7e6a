"""Slurm: the sbatch script of a plan (pure, same plan → same bytes), then written and submitted with sbatch."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from ...errors import ConfigError, LaunchError
from ...process import interactive, which
from .. import jobrecord, runtimes, slurmctl, steps
from ..frameworks import glue_for, runs
from ..jobcontrol import ShellCommand
from ..model import LaunchPlan
from ..shell import expand_quote, q, q_value
from ..slurmjobs import SlurmJobControl
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
    for flag, value in (("--mem", req.mem), ("--mem-per-cpu", req.mem_per_cpu), ("--mem-per-gpu", req.mem_per_gpu)):
        if value is not None:
            opts.append(f"{flag}={value}")
    if plan.time:
        opts.append(f"--time={plan.time}")
    opts.append(f"--output={req.output or f'{req.name}-%j.out'}")
    if req.error:
        opts.append(f"--error={req.error}")
    if req.mail_type:
        opts.append(f"--mail-type={req.mail_type}")
    if req.mail_user:
        opts.append(f"--mail-user={req.mail_user}")
    if req.array:
        opts.append(f"--array={req.array}")
    if req.after:
        opts.append(f"--dependency=afterok:{':'.join(req.after)}")
    return opts


def exported_env(plan: LaunchPlan) -> list[tuple[str, str]]:
    """Site environment, then the user's --env (which wins): the literal values, which the batch script exports
    (values that name variables are set per task, steps.env_prelude)."""
    return steps.job_env(plan)[0]


def _path_word(value: str) -> str:
    return expand_quote("$HOME" + value[1:]) if value.startswith("~") else q(value)


# conda's shell function without a login shell (the guides' `#!/bin/bash -l` or `source activate`): the conda
# a module put on PATH, $CONDA_EXE, or a usual install; an old conda without `shell.bash hook` gets its
# `activate` script. None found: the job says where it looked (exit 127, as a missing command).
CONDA_INIT = (
    'if [ "$(type -t conda)" != function ]; then',
    '  for ckit_conda in "$(command -v conda)" "${CONDA_EXE:-}" /etc/profile.d/conda.sh \\',
    '      "${HOME}"/miniforge3/bin/conda "${HOME}"/mambaforge/bin/conda "${HOME}"/miniconda3/bin/conda \\',
    '      "${HOME}"/anaconda3/bin/conda /opt/conda/bin/conda; do',
    '    # shellcheck source=/dev/null',
    '    case "${ckit_conda}" in',
    '      "") ;;',
    '      *.sh) if [ -r "${ckit_conda}" ]; then . "${ckit_conda}"; break; fi ;;',
    '      *) if [ -x "${ckit_conda}" ]; then',
    '           eval "$("${ckit_conda}" shell.bash hook 2>/dev/null)" || true',
    '           PATH="$(dirname "${ckit_conda}"):${PATH}"; break',
    '         fi ;;',
    '    esac',
    '  done',
    'fi',
)
CONDA_MISSING = ('echo "ckit: --conda: no conda here (none on PATH after the modules, no \\$CONDA_EXE, '
                 '/etc/profile.d/conda.sh, ~/miniforge3, ~/mambaforge, ~/miniconda3, ~/anaconda3, /opt/conda): '
                 'load the module that provides it (--module) or set CONDA_EXE (--env)" >&2; exit 127')


def conda_lines(env: str) -> list[str]:
    """Activate the conda environment ``env`` (a name or a path) in the batch shell."""
    word = _path_word(env)
    return [*CONDA_INIT,
            f'if [ "$(type -t conda)" = function ]; then conda activate {word}',
            f"elif command -v activate >/dev/null; then . activate {word}  # conda before 4.4",
            f"else {CONDA_MISSING}; fi"]


def environment_lines(plan: LaunchPlan) -> list[str]:
    """Modules (site, --module, the runtime's), then a conda env or a venv; their scripts read unset variables."""
    modules = list(plan.modules) + ([plan.runtime.module] if plan.runtime.module else [])
    if not (modules or plan.conda or plan.venv):
        return []
    lines = ["set +u  # module, conda and venv scripts read unset variables"]
    if modules:
        lines += [*MODULE_INIT, "module purge", "module load " + " ".join(q(m) for m in modules)]
    if plan.conda:
        lines += conda_lines(plan.conda)
    if plan.venv:
        lines += ["# shellcheck source=/dev/null", f". {_path_word(plan.venv)}/bin/activate"]
    return [*lines, "set -u", ""]


def header(plan: LaunchPlan) -> list[str]:
    image = plan.image.value if plan.image else "none"
    return ["#!/bin/bash", *(f"#SBATCH {o}" for o in sbatch_options(plan)),
            f"# ckit launch: site {plan.site.name}, framework {plan.framework}"
            + (f" ({plan.launcher})" if plan.launcher else "")
            + f", runtime {plan.runtime.kind}, image {image!r}".replace("\n", " "),
            f"# {runs(plan)}", *code_comment(plan),
            # what ckit runs on this machine first (not part of the job): a dry run shows it too
            *(f"# --fetch, run here in the image before sbatch: {line}" for line in plan.request.fetch),
            "set -euo pipefail", ""]


def code_comment(plan: LaunchPlan) -> list[str]:
    """Which code the job runs (--code), where it comes from and where it goes."""
    if plan.code is None:
        return []
    where = "at $CKIT_CODE" if plan.runtime.kind == "none" else f"laid over the image at {plan.code.dest}"
    return [f"# code: {plan.code.digest} ({plan.code.files} files, {plan.code.size} bytes) from "
            f"{plan.code.source!r}, copied to {plan.code.folder}, {where}".replace("\n", " ")]


def prologue(plan: LaunchPlan, env: list[tuple[str, str]], setup: tuple[str, ...], pre: bool = True) -> list[str]:
    """Exports (first: MODULEPATH may be one), modules and envs, the image, the runtime's setup, --pre lines,
    then ``setup``."""
    runtime = runtimes.REGISTRY.get(plan.runtime.kind, "--runtime")
    body = [f"export {name}={q_value(value)}" for name, value in env] + ([""] if env else [])
    body += environment_lines(plan)
    word = runtime.image_word(plan)
    if word:
        body += [f"export CKIT_IMAGE={word}", ""]
    for lines in (runtime.setup(plan), ("# --pre", *plan.request.pre) if plan.request.pre and pre else (), setup):
        if lines:
            body += [*lines, ""]
    return body


def fallbacks(text: str) -> list[str]:
    fallbacks = []
    if "${USER}" in text:  # a submit environment without USER (set -u) still has SLURM_JOB_USER
        fallbacks.append('export USER="${USER:-${SLURM_JOB_USER}}"')
    if "${HOME}" in text:
        fallbacks.append('export HOME="${HOME:-$(getent passwd "${SLURM_JOB_USER}" | cut -d : -f 6)}"')
    return [*fallbacks, ""] if fallbacks else []


def render_sbatch(plan: LaunchPlan) -> str:
    env = exported_env(plan)
    glue = glue_for(plan, tuple(name for name, _ in env))
    text = "\n".join(prologue(plan, env, glue.setup) + list(glue.body))
    return "\n".join(header(plan) + fallbacks(text)) + "\n" + text + "\n"


SHELL = ("sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; fi; exec sh")


def render_shell(plan: LaunchPlan) -> tuple[list[str], str]:
    """``salloc`` options and the bash text it runs: the job's environment (modules, conda, the framework's
    variables: MASTER_ADDR, CKIT_HOSTS…), then one task with a terminal on the first node, in the image."""
    env = exported_env(plan)
    names = tuple(name for name, _ in env)
    setup: tuple[str, ...] = ()
    if plan.framework != "none":
        glue = glue_for(plan, names)
        setup, names = glue.setup, glue.exports or names
    step = steps.srun(plan, names, steps.user_words(plan), options=["--nodes=1", "--ntasks=1"], tty=True)
    text = "\n".join(["set -euo pipefail", *prologue(plan, env, setup), step])
    options = [o for o in sbatch_options(plan) if not o.startswith(("--output=", "--error=", "--mail-"))]
    return options, "\n".join(fallbacks(text)) + text + "\n"


def log_folders(plan: LaunchPlan, cwd: Path) -> list[Path]:
    """The folders of ``--output``/``--error`` (relative to ``cwd``): Slurm opens the log before the script runs
    and does not create them. A folder named by the job id cannot exist before the job (refused in the plan)."""
    known = {"x": plan.name, "u": os.environ.get("USER", ""), "%": "%"}
    return [cwd / re.sub(r"%([xu%])", lambda m: known[m.group(1)], pattern.rsplit("/", 1)[0])
            for pattern in (plan.request.output, plan.request.error) if pattern and "/" in pattern]


class Slurm(SlurmJobControl, SchedulerBackend):
    name = "slurm"
    summary = "an sbatch script, written and submitted"
    order = 10
    variable_prefixes = ("SLURM_", "SLURMD_")  # SLURMD_NODENAME: the node a task runs on
    cannot = {"endpoints": "a Slurm job has no platform endpoints: open a shell on its nodes with "
                           "ckit launch --interactive"}
    shell_program = SHELL
    clients_package = "slurm-client"

    def submits(self, plan: LaunchPlan, how: Execution) -> bool:
        if how.dry_run or how.submit is False or plan.request.interactive:
            return False
        return _submitting(how)

    def render(self, plan: LaunchPlan) -> str:
        return render_sbatch(plan)

    def shell(self, plan: LaunchPlan) -> ShellCommand:
        options, text = render_shell(plan)
        return ShellCommand(plan.site.name, ["salloc", *options, "bash", "-c", text], text, plan.warnings)

    def execute(self, plan: LaunchPlan, job: str, how: Execution) -> LaunchResult:
        if plan.request.interactive:
            return self.interactive(plan, how)
        result = LaunchResult(plan.site.name, self.name, job, plan.warnings, runs=runs(plan))
        if how.dry_run:
            return result
        submitting = _submitting(how)
        _refuse(plan, how, submitting)
        path = _write(plan, job, how, result, submitting)
        if submitting:
            self._submit(plan, path, how, result)
        return result

    def _submit(self, plan: LaunchPlan, path: Path, how: Execution, result: LaunchResult) -> None:
        """sbatch ``path``, keep ckit's record of the job, and with --wait follow it to its end."""
        from ..submit import submit

        done = submit(path, cwd=how.cwd)
        result.job_id = done.job_id
        note = jobrecord.keep(jobrecord.new(done.job_id, plan.site.name, self.name, plan.name, how.cwd,
                                            plan.request.output or f"{plan.name}-%j.out", plan.request.error,
                                            path, code=plan.code), how.records)
        result.warnings += (note,) if note else ()
        if not how.wait:
            return
        log = slurmctl.log_path(plan.request.output or f"{plan.name}-%j.out", done.job_id, plan.name, how.cwd)
        error = slurmctl.log_path(plan.request.error, done.job_id, plan.name, how.cwd) if plan.request.error else None
        logs = [("output", log)] if log else []
        logs += [("error", error)] if error and error != log else []
        result.exit_code = self.waited_exit_code(done.job_id, how.records, logs=logs, on_event=how.on_event)
        result.output = str(log) if log else None
        from .. import frameworks

        framework = frameworks.REGISTRY.get(plan.framework, "--framework")
        result.extra.update(framework.after_wait(plan, log))

    def interactive(self, plan: LaunchPlan, how: Execution) -> LaunchResult:
        """``salloc`` with the job's resources; a terminal on its first node with the job's environment."""
        from ...process import require

        if how.wait or how.submit is not None or how.script is not None:
            raise ConfigError("--interactive opens the allocation itself: it takes no --submit, --no-submit, "
                              "--wait or --script", hint="drop them")
        options, text = render_shell(plan)
        argv = ["salloc", *options, "bash", "-c", text]
        result = LaunchResult(plan.site.name, self.name, " ".join(argv[:-1]) + " '…'\n" + text, plan.warnings)
        if how.dry_run:
            return result
        if plan.request.fetch:
            fetch(plan, how.cwd)
        ship_code(plan, how.cwd, result)
        require("salloc", purpose="open an interactive allocation", package=self.clients_package)
        result.exit_code = interactive(argv, cwd=how.cwd)
        return result


# What a written or submitted job cannot combine, as (refused when, message, fix), checked in this order before
# anything is written.
REFUSALS: tuple[tuple[Callable[[LaunchPlan, Execution], bool], str, str], ...] = (
    (lambda plan, how: how.wait and not how.submit, "--wait needs --submit", "add --submit"),
    (lambda plan, how: how.wait and bool(plan.request.array), "--wait follows one job; --array submits one per index",
     "drop --wait and follow them with ckit jobs"),
)


def _refuse(plan: LaunchPlan, how: Execution, submitting: bool) -> None:
    """The first refusal that applies, else the site's submit_from rule when the job is to be submitted."""
    from ..rules import submit_from_violation

    for applies, message, fix in REFUSALS:
        if applies(plan, how):
            raise ConfigError(message, hint=fix)
    violation = submit_from_violation(plan.site, how.cwd) if submitting else None
    if violation:
        raise violation


def _write(plan: LaunchPlan, job: str, how: Execution, result: LaunchResult, submitting: bool) -> Path:
    """--fetch (when the job is submitted now), the --code copy, the script and the log folders; the script."""
    from ..submit import write_script

    if plan.request.fetch and submitting:
        fetch(plan, how.cwd)
    elif plan.request.fetch:
        result.warnings += ("--fetch ran nothing: the job is only written (no sbatch here, or --no-submit); "
                            "it runs when ckit submits the job (--submit)",)
    ship_code(plan, how.cwd, result)
    image = [Path(plan.request.image)] if plan.request.image else []  # the script never replaces the image
    path = write_script(job, how.script or how.cwd / f"{plan.name}.sbatch", inputs=image)
    result.script = str(path)
    for folder in log_folders(plan, how.cwd):
        folder.mkdir(parents=True, exist_ok=True)
    return path


def _submitting(how: Execution) -> bool:
    """--submit, or neither --submit nor --no-submit and sbatch is here."""
    return bool(how.submit or (how.submit is None and which("sbatch")))


def ship_code(plan: LaunchPlan, cwd: Path, result: LaunchResult) -> None:
    """The job's read-only copy of the --code folder under the submit folder, which the script names."""
    if plan.code is None:
        return
    from ..code import default_index, pack

    folder, made = pack(plan.code, cwd, default_index())
    result.extra["code"] = {"digest": plan.code.digest, "source": plan.code.source, "dest": plan.code.dest,
                            "folder": str(folder), "files": plan.code.files, "bytes": plan.code.size, "new": made}


# --fetch LINE: what the compute nodes cannot download (no internet on tara's and twnia2's) is fetched on this
# machine before the job is written (seed 004: "download on the frontend first"), by the runtime's own words as
# a task runs them, so the code that reads the data in the job is the code that downloads it here.
def render_fetch(plan: LaunchPlan, line: str) -> str:
    """bash text that runs ``line`` here as a task of the job would run its command (no scheduler)."""
    env = exported_env(plan)
    names = tuple(name for name, _ in env)
    step = " ".join(steps.program(plan, names, ["sh", "-c", q(line)]))
    # the runtimes bind and start in the submit folder, which outside a job is this one
    body = ["set -euo pipefail", "exec 1>&2  # the output is the fetch's report, not ckit's (--json)",
            'export SLURM_SUBMIT_DIR="$PWD"', *prologue(plan, env, (), pre=False), step]
    text = "\n".join(body)
    return "\n".join(fallbacks(text)) + text + "\n"


def fetch(plan: LaunchPlan, cwd: Path) -> None:
    """Run every ``--fetch`` line in ``cwd``; the first that fails stops the launch."""
    for line in plan.request.fetch:
        code = interactive(["bash", "-c", render_fetch(plan, line)], cwd=cwd)
        if code:
            raise LaunchError(f"--fetch {line!r} failed with exit code {code}; nothing was written or submitted",
                              hint="run it by hand to see why (ckit launch … --dry-run prints the job)")


BACKENDS = (Slurm(),)
