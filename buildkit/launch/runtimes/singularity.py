"""singularity / apptainer: ``exec`` of a SIF (or a docker:// reference) in each task.

``exec``, not ``run``: the SIF's runscript re-evaluates its arguments (apptainer's semantics, so
``'$(touch x)'`` would run), while ``exec`` hands them to the program verbatim. Both runtimes bind the
current (submit) folder and start there; ``--workdir`` becomes ``--pwd``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..shell import q, qv
from . import RuntimeBackend, mount_words

if TYPE_CHECKING:
    from ..plan import LaunchPlan


class Singularity(RuntimeBackend):
    name = "singularity"
    summary = "singularity exec of a .sif (or docker://REF) in each task"
    order = 10
    files = (".sif", ".simg", ".img")
    refs = True
    artifact = "sif"

    def image_word(self, plan: LaunchPlan) -> str | None:
        if plan.image is not None and plan.image.kind == "ref":
            return q(f"docker://{plan.image.value}")
        return super().image_word(plan)

    def task_words(self, plan: LaunchPlan, exports: Sequence[str], tty: bool = False) -> list[str]:
        words = [q(plan.runtime.command or self.name), "exec", *(q(f) for f in plan.runtime.flags)]
        if plan.gpus_per_node:
            words.append("--nv")
        for mount in mount_words(plan):
            words += ["--bind", mount]
        if plan.request.workdir:
            words += ["--pwd", q(plan.request.workdir)]
        return [*words, qv("CKIT_IMAGE")]


class Apptainer(Singularity):
    name = "apptainer"
    summary = "apptainer exec of a .sif (or docker://REF) in each task"
    order = 11


BACKENDS = (Singularity(), Apptainer())
