"""singularity / apptainer: ``exec`` of a SIF (or a docker:// reference) in each task.

``exec``, not ``run``: the SIF's runscript re-evaluates its arguments (apptainer's semantics, so
``'$(touch x)'`` would run), while ``exec`` hands them to the program verbatim. Both runtimes bind the
current (submit) folder and start there; ``--workdir`` becomes ``--pwd``.

SingularityCE (3.x to today's main) answers ``--pwd DIR`` for a DIR the container lacks by starting in ``$HOME``,
silently and with exit 0 (a failed chdir falls back); Apptainer refuses it. So a singularity task with
``--workdir`` changes into the folder itself through the container's ``/bin/sh`` (which SingularityCE's own exec
action script needs anyway) and fails with exit 2, naming the folder, when it is not there. ckit does not create
it: a mistyped folder would otherwise quietly collect the job's results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..shell import q, qv
from . import RuntimeBackend, mount_words

if TYPE_CHECKING:
    from ..model import LaunchPlan


WORKDIR_CHECK = ('cd "$1" 2>/dev/null || { echo "ckit: --workdir $1 is not a folder in the container (bind it '
                 'with --mount, or make it in the image)" >&2; exit 2; }; shift; exec "$@"')


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
        return [*words, qv("CKIT_IMAGE"), *self.workdir_check(plan)]

    def workdir_check(self, plan: LaunchPlan) -> list[str]:
        """Words that make the task fail when --workdir is missing in the container (see the module's notes)."""
        if not plan.request.workdir:
            return []
        return ["/bin/sh", "-c", q(WORKDIR_CHECK), "ckit-workdir", q(plan.request.workdir)]


class Apptainer(Singularity):
    name = "apptainer"
    summary = "apptainer exec of a .sif (or docker://REF) in each task"
    order = 11

    def workdir_check(self, plan: LaunchPlan) -> list[str]:
        return []  # apptainer exec --pwd fails by itself when the folder is missing


BACKENDS = (Singularity(), Apptainer())
