"""nccl-tests: all_reduce_perf across the whole allocation with the site's NCCL settings.

One task per node drives all its GPUs (``-g GPUS``), or ``--ntasks-per-node T`` tasks each drive GPUS/T of them
(``-g GPUS/T``; T = GPUS is one GPU per MPI rank): each process uses ``-t`` threads × ``-g`` GPUs, and the
tasks of a node may not ask for more GPUs than it has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import ConfigError
from .. import steps
from ..model import LaunchPlan
from . import FrameworkBackend, Glue


def default_command(gpus_per_node: int, tasks_per_node: int = 1) -> tuple[str, ...]:
    return ("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", str(max(gpus_per_node // tasks_per_node, 1)))


def _count(command: tuple[str, ...], short: str, long: str) -> int:
    """The value of ``-g 8``/``-g8``/``--ngpus 8``/``--ngpus=8`` (nccl-tests' getopt), 1 when absent."""
    value = "1"
    for index, arg in enumerate(command):
        if arg in (short, long) and index + 1 < len(command):
            value = command[index + 1]
        elif arg.startswith(long + "="):
            value = arg.split("=", 1)[1]
        elif arg.startswith(short) and len(arg) > len(short) and not arg.startswith("--"):
            value = arg[len(short):]
    return int(value) if value.isdigit() else 1


class NcclTests(FrameworkBackend):
    name = "nccl-tests"
    summary = "all_reduce_perf over the allocation; --wait prints the bus-bandwidth report"
    order = 70
    per_node = (None,)
    needs_command = False
    default_program = "all_reduce_perf"
    reads = {"mpi": (None,)}

    def check(self, plan: LaunchPlan) -> None:
        gpus, tasks = plan.gpus_per_node, plan.tasks_per_node
        if not gpus:
            return
        if gpus % tasks:
            raise ConfigError(f"--ntasks-per-node {tasks} does not divide the node's {gpus} GPUs among the "
                              "all_reduce_perf processes", hint=f"use a divisor of {gpus}, e.g. --ntasks-per-node {gpus}")
        if not plan.command:
            return
        threads, per_thread = _count(plan.command, "-t", "--nthreads"), _count(plan.command, "-g", "--ngpus")
        if threads * per_thread * tasks > gpus:
            raise ConfigError(f"all_reduce_perf -t {threads} -g {per_thread} in each of {tasks} tasks per node "
                              f"drives {threads * per_thread * tasks} GPUs; a node has {gpus}",
                              hint=f"give each task -g {max(gpus // tasks // threads, 1)}"
                                   + ("" if tasks == 1 else f", or --ntasks-per-node 1 with -g {gpus}"))

    def glue(self, plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
        command = plan.command or default_command(plan.gpus_per_node, plan.tasks_per_node)
        return Glue((), (), (steps.srun(plan, exports, steps.command_words(command, plan.variables), mpi=True),))

    def after_wait(self, plan: LaunchPlan, log: Path | None) -> dict[str, Any]:
        """The bus-bandwidth report of the job's output (each run in it)."""
        from ..nccl_report import parse_runs

        if log is None:
            return {}
        try:
            runs = parse_runs(log.read_text(encoding="utf-8", errors="replace"), str(log))
        except (OSError, ConfigError) as err:
            return {"nccl_error": str(err)}
        return {"nccl": [r.as_json() for r in runs]}


BACKENDS = (NcclTests(),)
