"""No framework: the command runs once per task."""

from __future__ import annotations

from .. import steps
from ..model import LaunchPlan
from . import FrameworkBackend, Glue


class NoFramework(FrameworkBackend):
    name = "none"
    summary = "the command once per task"
    order = 0

    def glue(self, plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
        return Glue(setup=(), exports=(), body=(steps.srun(plan, exports, steps.user_words(plan)),))


BACKENDS = (NoFramework(),)
