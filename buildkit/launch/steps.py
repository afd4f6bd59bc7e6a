"""One ``srun`` step of a job: the runtime's words around the program, in every task of the step.

Every step passes ``--export=ALL``: ``sbatch --export=NONE`` (or a site-wide ``SBATCH_EXPORT=NONE``) is
inherited by ``srun`` and would keep the script's own exports (ranks, addresses, NCCL settings) from the tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import runtimes, words
from .model import JobVariables, LaunchPlan
from .shell import q

TASK_ARGV0 = "ckit-task"
ARGS_ARGV0 = "ckit-args"


def job_env(plan: LaunchPlan) -> tuple[list[tuple[str, str]], list[tuple[str, tuple[words.Part, ...]]]]:
    """The site's env, then ``--env`` (which wins): literal values (exported by the batch script, passed into
    containers by name) and values that name variables (set per task where the program starts)."""
    merged: dict[str, str] = dict(code_env(plan))
    merged.update(dict(plan.site.env))
    merged.update(dict(plan.env))
    plain, per_task = [], []
    for name, value in merged.items():
        parts = words.parse(value, f"--env {name}", plan.variables)
        if words.refs(parts):
            per_task.append((name, parts))
        else:
            plain.append((name, words.text_of(parts)))
    return plain, per_task


def code_env(plan: LaunchPlan) -> list[tuple[str, str]]:
    """``CKIT_CODE`` (where the tasks find the ``--code`` folder: DEST in a container, the job's copy without
    one) and ``CKIT_CODE_DIGEST`` (which code it is), in the grammar of ``--env`` values."""
    if plan.code is None:
        return []
    where = runtimes.code_source(plan) if plan.runtime.kind == "none" else plan.code.dest
    return [("CKIT_CODE", words.literal(where) if where == plan.code.dest else str(where)),
            ("CKIT_CODE_DIGEST", plan.code.digest)]


def env_prelude(plan: LaunchPlan) -> str:
    """``export NAME="…${VAR}…"; `` for each value that names variables, read in the task (sh text)."""
    _, per_task = job_env(plan)
    return "".join(f"export {name}={words.sh_word(parts)}; " for name, parts in per_task)


def runtime_of(plan: LaunchPlan) -> runtimes.RuntimeBackend:
    return runtimes.REGISTRY.get(plan.runtime.kind, "--runtime")


class ArgsScript(list[str]):
    """The command as ``sh -c 'set -- WORDS; exec "$@"' ckit-args``: its words name variables, read where it starts.
    ``setter`` is the ``set -- WORDS; `` part, which the image's ENTRYPOINT step takes over (one shell, not two)."""

    def __init__(self, setter: str) -> None:
        super().__init__(["sh", "-c", q(setter + 'exec "$@"'), ARGS_ARGV0])
        self.setter = setter


def program(plan: LaunchPlan, exports: Sequence[str], argv: Sequence[str], task_script: str | None = None,
            tty: bool = False) -> list[str]:
    """The runtime call plus the program; ``task_script`` (sh text using "$@") runs inside the container per task,
    before the image's ENTRYPOINT (a runtime that runs it), which runs right before the program."""
    inner = list(argv)
    entry = None if tty else runtime_of(plan).entry_word(plan)  # a terminal is a shell, as `singularity shell`
    if entry and isinstance(argv, ArgsScript):
        inner = ["/bin/sh", "-c", q(argv.setter) + entry, "ckit-entrypoint"]
    elif entry:
        inner = ["/bin/sh", "-c", entry, "ckit-entrypoint", *inner]
    prelude = env_prelude(plan)  # the --env values that name variables, before the framework's own per-task lines
    if task_script is not None or prelude:
        inner = ["sh", "-c", q(prelude + (task_script or 'exec "$@"')), TASK_ARGV0, *inner]
    runtime = runtime_of(plan)
    return [*runtime.task_words(plan, exports, tty), *(inner if tty else runtime.around_task(plan, inner))]


def srun(plan: LaunchPlan, exports: Sequence[str], argv: Sequence[str], *, task_script: str | None = None,
         options: Sequence[str] = (), mpi: bool = False, tty: bool = False) -> str:
    """One ``srun`` line that runs ``words`` (already shell words) in every task of the step."""
    # --kill-on-bad-exit: a rank that fails ends the step; the others would otherwise wait in their first
    # collective (or MPI's PMIx fence) until the time limit, burning the allocation. A terminal's step overlaps:
    # the steps started from it (srun in an interactive allocation) would otherwise wait for its CPUs forever.
    head = ["srun", *(["--pty", "--overlap"] if tty else ["--kill-on-bad-exit=1"]), "--export=ALL"]
    if mpi and plan.mpi_plugin:
        head.append(f"--mpi={plan.mpi_plugin}")
    head += list(options)
    if not tty:
        head += per_node_logs(plan)
    if plan.runtime.kind == "none" and plan.request.workdir:
        head.append(f"--chdir={q(plan.request.workdir)}")
    head += runtime_of(plan).srun_words(plan, exports)
    return " ".join([*head, *program(plan, exports, argv, task_script, tty)])


# the file-name patterns whose value differs between the nodes or tasks of one step (srun's, as sbatch's)
PER_NODE = ("%N", "%n", "%t")


def per_node_logs(plan: LaunchPlan) -> list[str]:
    """``--output``/``--error`` of the step when ``-o``/``-e`` name a node or a task (``%N.out``): sbatch expands
    them for the batch host alone, so each step says them again and every node writes its own log, as the oci
    guide's TensorFlow workers do (``HOSTNAME.out``)."""
    opts = []
    for flag, pattern in (("--output", plan.request.output), ("--error", plan.request.error)):
        if pattern and any(p in pattern for p in PER_NODE):
            opts.append(f"{flag}={q(pattern)}")
    return opts


def command_words(command: Sequence[str], variables: JobVariables) -> list[str]:
    """The command as shell words: as given when no argument names a job variable; else a small ``sh -c`` that
    reads them where the program starts (after a launcher set RANK and the like) and execs it."""
    parsed = [words.parse(arg, f"argument {i + 1} of the command", variables) for i, arg in enumerate(command)]
    if not any(words.refs(p) for p in parsed):
        return [q(words.text_of(p)) for p in parsed]
    return ArgsScript("set -- " + " ".join(words.sh_word(p) for p in parsed) + "; ")


def user_words(plan: LaunchPlan) -> list[str]:
    return command_words(plan.command, plan.variables)
