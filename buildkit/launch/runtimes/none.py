"""No container: the program runs on the node, with the site's modules and an optional venv or conda env."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import ConfigError
from . import RuntimeBackend

if TYPE_CHECKING:
    from ...site.model import Site
    from ..model import Image, ImageFacts, LaunchPlan, LaunchRequest


class NoRuntime(RuntimeBackend):
    name = "none"
    summary = "the program runs on the node (modules, --venv, --conda)"
    order = 90
    host_envs = True

    def check(self, site: Site, req: LaunchRequest, image: Image | None, facts: ImageFacts) -> None:
        if image is not None and site.scheduler != "dlws":
            other = [r.kind for r in site.runtimes if r.kind != "none"]
            raise ConfigError(f"--runtime none cannot run --image {image.value}",
                              hint=f"drop --image or use one of: {', '.join(other)}" if other else "drop --image")

    def check_plan(self, plan: LaunchPlan) -> None:
        super().check_plan(plan)
        if plan.request.mounts and plan.site.scheduler != "dlws":
            raise ConfigError(f"--mount binds into a container; --runtime none runs on the node, where "
                              f"{', '.join(m.split(':')[0] for m in plan.request.mounts)} is what it is",
                              hint="drop --mount (use the path itself), or run in an image (--image, --runtime)")


BACKENDS = (NoRuntime(),)
