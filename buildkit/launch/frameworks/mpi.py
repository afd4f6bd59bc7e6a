"""MPI programs (mpi4py, MPI binaries): one task per GPU (or per --tasks-per-node) under srun's MPI plugin."""

from __future__ import annotations

from .. import steps
from ..model import LaunchPlan
from . import FrameworkBackend, Glue


class Mpi(FrameworkBackend):
    name = "mpi"
    summary = "an MPI program: srun --mpi=<the site's plugin> starts every rank"
    order = 60
    reads = {"mpi": (None,)}

    def glue(self, plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
        return Glue((), (), (steps.srun(plan, exports, steps.user_words(plan), mpi=True),))


BACKENDS = (Mpi(),)
