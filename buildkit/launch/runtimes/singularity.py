"""singularity / apptainer: ``exec`` of a SIF (or a docker:// reference) in each task, through the image's
ENTRYPOINT.

``exec``, not ``run``: the SIF's runscript re-evaluates its arguments (``eval``, so ``'$(touch x)'`` would run),
while ``exec`` hands them to the program verbatim. What ``run`` adds is the image's ENTRYPOINT (NGC's sets up
CUDA forward compatibility on an older driver), so each task starts it itself: a docker-derived SIF's
runscript names it on its ``OCI_ENTRYPOINT=`` line (SingularityCE 3.x, Apptainer and ckit write the same), which
the task reads and runs with the arguments as they are (``set -- ENTRYPOINT "$@"``). A SIF built from a ``.def``
with a runscript of its own has no such line: its command runs directly. Both runtimes bind the current (submit)
folder and start there; ``--workdir`` becomes ``--pwd``.

SingularityCE (3.x to today's main) answers ``--pwd DIR`` for a DIR the container lacks by starting in ``$HOME``,
silently and with exit 0 (a failed chdir falls back); Apptainer refuses it. So a singularity task with
``--workdir`` changes into the folder itself through the container's ``/bin/sh`` (which SingularityCE's own exec
action script needs anyway) and fails with exit 2, naming the folder, when it is not there. ckit does not create
it: a mistyped folder would otherwise quietly collect the job's results.

The job's variables reach the container as ``SINGULARITYENV_NAME`` / ``APPTAINERENV_NAME``, not only through the
host environment: Apptainer and SingularityCE >= 3.6 let the image's ENV win over a host variable of the same name,
so ``--env PATH=…`` or a ``MASTER_PORT`` the image also sets would otherwise be lost silently (the prefixed form
wins over both). A ``singularity`` site may run Apptainer under that name: its tasks get both spellings, with one
value, which Apptainer takes without a word.
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
# The image's ENTRYPOINT before the command, as `singularity run` starts it, without re-reading the arguments:
# the runscript's OCI_ENTRYPOINT line holds it as double-quoted words (the image's own text, which `run` would
# evaluate too); "$@" stays "$@".
ENTRYPOINT = ('r=/.singularity.d/runscript; if [ -r "$r" ] && grep -q "^OCI_ENTRYPOINT=" "$r" '
              '&& grep -q "^OCI_CMD=" "$r"; then eval "$(sed -n "/^OCI_ENTRYPOINT=/,/^OCI_CMD=/p" "$r")"; '
              'eval "set -- ${OCI_ENTRYPOINT} \\"\\$@\\""; fi; exec "$@"')


class Singularity(RuntimeBackend):
    name = "singularity"
    summary = "singularity exec of a .sif (or docker://REF) in each task"
    order = 10
    files = (".sif", ".simg", ".img")
    refs = True
    artifact = "sif"
    checks_workdir = True

    def image_word(self, plan: LaunchPlan) -> str | None:
        if plan.image is not None and plan.image.kind == "ref":
            return q(f"docker://{plan.image.value}")
        return super().image_word(plan)

    env_prefixes: tuple[str, ...] = ("SINGULARITYENV_", "APPTAINERENV_")

    def task_words(self, plan: LaunchPlan, exports: Sequence[str], tty: bool = False) -> list[str]:
        forced = [f'{prefix}{name}="${{{name}}}"' for name in exports for prefix in self.env_prefixes]
        words = [*(["env", *forced] if forced else []), q(plan.runtime.command or self.name), "exec",
                 *(q(f) for f in plan.runtime.flags)]
        if plan.gpus_per_node:
            words.append("--nv")
        for mount in mount_words(plan):
            words += ["--bind", mount]
        if plan.request.workdir:
            words += ["--pwd", q(plan.request.workdir)]
        if plan.request.workdir and self.checks_workdir:  # see the module's notes
            return [*words, qv("CKIT_IMAGE"), "/bin/sh", "-c", '"${ckit_workdir}"', "ckit-workdir",
                    q(plan.request.workdir)]
        return [*words, qv("CKIT_IMAGE")]

    def setup(self, plan: LaunchPlan) -> tuple[str, ...]:
        lines: tuple[str, ...] = ("# Each program a task starts runs through the image's ENTRYPOINT (the runscript's OCI_ENTRYPOINT),",
                 "# as `singularity run` starts it, with its arguments as given",
                 f"ckit_entry={q(ENTRYPOINT)}")
        if plan.request.workdir and self.checks_workdir:
            lines += ("# Each task changes into --workdir itself: exit 2 when the container lacks it",
                      f"ckit_workdir={q(WORKDIR_CHECK)}")
        return lines

    def entry_word(self, plan: LaunchPlan) -> str | None:
        return '"${ckit_entry}"'


class Apptainer(Singularity):
    name = "apptainer"
    summary = "apptainer exec of a .sif (or docker://REF) in each task"
    order = 11
    checks_workdir = False  # apptainer exec --pwd fails by itself when the folder is missing
    env_prefixes = ("APPTAINERENV_",)


BACKENDS = (Singularity(), Apptainer())
