"""No framework: the command runs once per task."""

from __future__ import annotations

from .. import steps
from ..model import LaunchPlan
from . import FrameworkBackend, Glue


class NoFramework(FrameworkBackend):
    name = "none"
    summary = "the command once per task"
    order = 0
    reads = {"mpi": (None,)}

    def glue(self, plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
        # --mpi given: the tasks are MPI ranks (an MPI program without the mpi framework's site default)
        mpi = plan.request.mpi is not None
        return Glue(setup=(), exports=(), body=(steps.srun(plan, exports, steps.user_words(plan), mpi=mpi),))


BACKENDS = (NoFramework(),)
