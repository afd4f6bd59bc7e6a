"""``ckit.Executor``: submitit's executor (:mod:`buildkit.orchestration.executor`) with this API's front, so a
function's job is planned, checked and submitted as ``ckit launch`` plans one (the user's defaults, the image
path, the preflight)."""

from __future__ import annotations

from typing import Any

from ..launch.plan import LaunchPlan, LaunchRequest
from ..launch.schedulers import Execution, LaunchResult
from ..orchestration import executor
from ..orchestration.executor import FunctionJob as FunctionJob
from ..site.model import Site


class _Api:
    """The executor's front: this API's calls."""

    def plan(self, site: Site, request: LaunchRequest) -> LaunchPlan:
        from ._launch import plan_launch

        return plan_launch(site, request)

    def render(self, plan: LaunchPlan) -> Any:
        from ._launch import render

        return render(plan)

    def execute(self, plan: LaunchPlan, how: Execution) -> LaunchResult:
        from ._launch import execute

        return execute(plan, how)


class Executor(executor.Executor):
    __doc__ = executor.Executor.__doc__
    front = _Api()
