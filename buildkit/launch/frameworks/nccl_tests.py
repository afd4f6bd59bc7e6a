"""nccl-tests: all_reduce_perf across the whole allocation with the site's NCCL settings (one task per node)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import ConfigError
from .. import steps
from ..model import LaunchPlan
from ..shell import q
from . import FrameworkBackend, Glue


def default_command(gpus_per_node: int) -> tuple[str, ...]:
    return ("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", str(max(gpus_per_node, 1)))


class NcclTests(FrameworkBackend):
    name = "nccl-tests"
    summary = "all_reduce_perf over the allocation; --wait prints the bus-bandwidth report"
    order = 70
    per_node = (None,)
    needs_command = False

    def glue(self, plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
        command = plan.command or default_command(plan.gpus_per_node)
        return Glue((), (), (steps.srun(plan, exports, [q(a) for a in command], mpi=True),))

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
