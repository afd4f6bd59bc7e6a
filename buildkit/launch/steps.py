"""One ``srun`` step of a job: the runtime's words around the program, in every task of the step.

Every step passes ``--export=ALL``: ``sbatch --export=NONE`` (or a site-wide ``SBATCH_EXPORT=NONE``) is
inherited by ``srun`` and would keep the script's own exports (ranks, addresses, NCCL settings) from the tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import runtimes
from .model import LaunchPlan
from .shell import q

TASK_ARGV0 = "ckit-task"


def runtime_of(plan: LaunchPlan) -> runtimes.RuntimeBackend:
    return runtimes.REGISTRY.get(plan.runtime.kind, "--runtime")


def program(plan: LaunchPlan, exports: Sequence[str], words: Sequence[str], task_script: str | None = None,
            tty: bool = False) -> list[str]:
    """The runtime call plus the program; ``task_script`` (sh text using "$@") runs inside the container per task."""
    inner = list(words)
    if task_script is not None:
        inner = ["sh", "-c", q(task_script), TASK_ARGV0, *inner]
    return [*runtime_of(plan).task_words(plan, exports, tty), *inner]


def srun(plan: LaunchPlan, exports: Sequence[str], words: Sequence[str], *, task_script: str | None = None,
         options: Sequence[str] = (), mpi: bool = False, tty: bool = False) -> str:
    """One ``srun`` line that runs ``words`` (already shell words) in every task of the step."""
    # --kill-on-bad-exit: a rank that fails ends the step; the others would otherwise wait in their first
    # collective (or MPI's PMIx fence) until the time limit, burning the allocation
    head = ["srun", *(["--pty"] if tty else ["--kill-on-bad-exit=1"]), "--export=ALL"]
    if mpi and plan.mpi_plugin:
        head.append(f"--mpi={plan.mpi_plugin}")
    head += list(options)
    if plan.runtime.kind == "none" and plan.request.workdir:
        head.append(f"--chdir={q(plan.request.workdir)}")
    head += runtime_of(plan).srun_words(plan, exports)
    return " ".join([*head, *program(plan, exports, words, task_script, tty)])


def user_words(plan: LaunchPlan) -> list[str]:
    return [q(a) for a in plan.command]
