"""Frameworks: the distributed-training glue, computed inside the job from Slurm's variables. One module each.

A framework declares its launchers (the first is the default), which of them start one task per node, and
the batch-level setup, the variables passed into containers and the steps that run the job.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from ..backend import Registry

if TYPE_CHECKING:
    from ..model import LaunchPlan


@dataclass(frozen=True)
class Glue:
    """Batch-level setup lines, the variables they export (passed into containers) and the lines that run the job."""

    setup: tuple[str, ...]
    exports: tuple[str, ...]
    body: tuple[str, ...]


class FrameworkBackend(abc.ABC):
    name = ""
    summary = ""
    order = 50
    launchers: tuple[str, ...] = ()  # the first is the default
    per_node: tuple[str | None, ...] = ()  # launchers (None: no launcher) that start one task per node
    needs_command = True
    default_program = "the command"  # what runs without a command (nccl-tests: its benchmark)
    # the variables the job defines for the command's tasks (words.py reads them per task), by launcher
    variables: dict[str | None, tuple[str, ...]] = {}
    # the options only some launchers read: option -> the launchers (None: no launcher) that read it
    reads: dict[str, tuple[str | None, ...]] = {}

    def launcher(self, requested: str | None, preferred: str | None = None) -> str | None:
        if requested and requested not in self.launchers:
            raise ConfigError(f"--launcher {requested} does not apply to --framework {self.name}",
                              hint=f"one of: {', '.join(self.launchers)}" if self.launchers else "drop --launcher")
        if requested:
            return requested
        if preferred in self.launchers:
            return preferred
        return self.launchers[0] if self.launchers else None

    def one_task_per_node(self, launcher: str | None) -> bool:
        return launcher in self.per_node

    def copies(self, plan: LaunchPlan) -> tuple[int, str]:
        """How many times the command runs, and where (the job's header and the dry run say it)."""
        return plan.total_tasks, f"{plan.tasks_per_node} per node on {node_count(plan.nodes)}"

    def check(self, plan: LaunchPlan) -> None:
        """Refuse a plan this framework cannot run (by default it runs every plan)."""
        return None

    def refusals(self, plan: LaunchPlan) -> list[str]:
        """One message per launcher option the user gave that this framework and launcher do not read."""
        from ..model import FLAGS, given

        out = []
        for option in LAUNCHER_OPTIONS:
            readers = self.reads.get(option, ())
            if given(plan.request, option) and plan.launcher not in readers:
                used = f" --launcher {plan.launcher}" if plan.launcher else ""
                where = ", ".join(f"--launcher {r}" if r else "its default" for r in readers)
                out.append(f"{FLAGS[option]} does not apply to --framework {self.name}{used}: "
                           + (f"it is read with {where}" if readers else "drop it"))
        return out

    @abc.abstractmethod
    def glue(self, plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
        """The framework's part of the job: batch-level setup, the variables tasks need, the steps."""

    def after_wait(self, plan: LaunchPlan, log: Path | None) -> dict[str, Any]:
        """What the finished job's log adds to the result (``ckit launch --wait``)."""
        return {}


def node_count(count: int) -> str:
    return f"{count} node" + ("s" if count != 1 else "")


def runs(plan: LaunchPlan) -> str:
    """``make runs 2×: 1 per node on 2 nodes``: how many copies of the command a job starts, and where (one
    line: a comment of the job script)."""
    backend = REGISTRY.get(plan.framework, "--framework")
    count, where = backend.copies(plan)
    program = re.sub(r"[\x00-\x1f\x7f]", "?", plan.command[0]) if plan.command else backend.default_program
    return f"{program} runs {count}×: {where}"


LAUNCHER_OPTIONS = ("gloo", "network_interface", "devices_per_node", "rank_table", "mpi")
NODE_LIST = 'mapfile -t ckit_nodes < <(scontrol show hostnames "${SLURM_JOB_NODELIST}")'
# A port derived from the job id: different for concurrent jobs, below the Linux ephemeral range (32768+).
JOB_PORT = "$((15000 + SLURM_JOB_ID % 15000))"
# This node's first non-loopback address (hostname -i can give 127.0.1.1 on Debian-style hosts).
SET_HOST_IP = "ip=$(hostname -I 2>/dev/null | cut -d ' ' -f 1); [ -n \"$ip\" ] || ip=$(hostname -i | cut -d ' ' -f 1)"
HOST_IP = SET_HOST_IP + '; echo "$ip"'
HOST_LIST = ('CKIT_HOSTS=$(printf "%s:{slots}," "${{ckit_nodes[@]}}")', 'export CKIT_HOSTS="${CKIT_HOSTS%,}"')


# The job's own folder, in the submit folder that every runtime mounts: files its steps write and read.
RUN_DIR = ('export CKIT_RUN_DIR="${SLURM_SUBMIT_DIR}/ckit-${SLURM_JOB_ID}"', 'mkdir -p "${CKIT_RUN_DIR}"')


def heredoc(path: str, text: str) -> tuple[str, ...]:
    """Lines that write ``text`` to ``path`` as it is (a quoted here-document: nothing in it expands)."""
    return (f'cat > "{path}" <<\'CKIT_EOF\'', *text.rstrip("\n").split("\n"), "CKIT_EOF")


def host_list(slots: int) -> tuple[str, ...]:
    """``CKIT_HOSTS=node1:slots,node2:slots`` from the allocation (horovodrun -H)."""
    return (NODE_LIST, HOST_LIST[0].format(slots=slots), HOST_LIST[1])


REGISTRY: Registry[FrameworkBackend] = Registry(__name__, __path__, "framework")


def glue_for(plan: LaunchPlan, site_exports: tuple[str, ...]) -> Glue:
    return REGISTRY.get(plan.framework, "--framework").glue(plan, site_exports)
