"""No framework: the command runs once per task."""

from __future__ import annotations

from .. import runtime
from ..plan import LaunchPlan
from . import Glue


def glue(plan: LaunchPlan, exports: tuple[str, ...]) -> Glue:
    return Glue(setup=(), exports=(), body=(runtime.step(plan, exports, runtime.user_words(plan)),))
