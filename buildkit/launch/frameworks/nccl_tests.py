"""nccl-tests: all_reduce_perf across the whole allocation with the site's NCCL settings (one task per node)."""

from __future__ import annotations

from .. import runtime
from ..plan import LaunchPlan
from ..shell import q
from . import Glue


def default_command(gpus_per_node: int) -> tuple[str, ...]:
    return ("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", str(max(gpus_per_node, 1)))


def glue(plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
    command = plan.command or default_command(plan.gpus_per_node)
    return Glue((), (), (runtime.step(plan, exports, [q(a) for a in command], mpi=True),))
