"""No framework: the command runs once per node (as ``srun`` does without ``-n``), or per --ntasks-per-node."""

from __future__ import annotations

from .. import steps
from ..model import LaunchPlan
from . import FrameworkBackend, Glue


class NoFramework(FrameworkBackend):
    name = "none"
    summary = "the command once per node (or per --ntasks-per-node task)"
    order = 0
    per_node = (None,)
    reads = {"mpi": (None,)}

    def glue(self, plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
        # --mpi given: the tasks are MPI ranks (an MPI program without the mpi framework's site default)
        mpi = plan.request.mpi is not None
        return Glue(setup=(), exports=(), body=(steps.srun(plan, exports, steps.user_words(plan), mpi=mpi),))


BACKENDS = (NoFramework(),)
