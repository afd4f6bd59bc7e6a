"""Pyxis/enroot: the container flags on each ``srun`` (never on ``#SBATCH`` lines: the batch script itself would
run in the image, without srun).

The container is named per job (``ckit-$SLURM_JOB_ID``), shared by the job's steps and removed when the job
ends; ``--keep-container`` keeps it for later jobs under a name that follows the image: the file's size,
mtime and inode, or the reference's pinned digest, so a replaced image is never run from a stale container.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..shell import escape_dq, expand_quote, q
from . import SUBMIT_MOUNT, RuntimeBackend, workdir_word

if TYPE_CHECKING:
    from ..plan import LaunchPlan

_KEY_OF_FILE = "stat -L -c '%n %s %Y %i' \"${CKIT_IMAGE}\" | sha256sum | cut -c 1-12"
_KEY_OF_REF = "printf '%s' \"${CKIT_IMAGE}\" | sha256sum | cut -c 1-12"


def pyxis_ref(ref: str) -> str:
    """A registry reference in pyxis's ``REGISTRY#IMAGE`` form (nvcr.io/nvidia/x:1 → nvcr.io#nvidia/x:1)."""
    if "#" in ref:
        return ref
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return ref


class Pyxis(RuntimeBackend):
    name = "pyxis"
    summary = "srun --container-image= a .sqsh or REGISTRY#IMAGE (Slurm + enroot)"
    order = 20
    files = (".sqsh", ".squashfs")
    refs = True
    artifact = "sqsh"

    def image_word(self, plan: LaunchPlan) -> str | None:
        if plan.image is not None and plan.image.kind == "ref":
            return q(pyxis_ref(plan.image.value))
        return super().image_word(plan)

    def setup(self, plan: LaunchPlan) -> tuple[str, ...]:
        if not plan.request.keep_container:
            return ('ckit_container="ckit-${SLURM_JOB_ID}"',
                    "# The job's container is removed from every node when the job ends (enroot names it pyxis_NAME,",
                    "# or pyxis_JOBID_NAME with container_scope=job, which pyxis removes itself).",
                    "ckit_remove_container() {",
                    '  srun --export=ALL --ntasks-per-node=1 enroot remove --force "pyxis_${ckit_container}" '
                    '>/dev/null 2>&1 || true',
                    "}",
                    "trap ckit_remove_container EXIT")
        assert plan.image is not None
        key = _KEY_OF_REF if plan.image.kind == "ref" else _KEY_OF_FILE
        return (f'ckit_container="ckit-$({key})"',)

    def srun_words(self, plan: LaunchPlan, exports: Sequence[str]) -> list[str]:
        # one double-quoted word: site mounts may name $USER, the user's stay literal
        site = [expand_quote(m)[1:-1] for m in plan.site.mounts]
        user = [escape_dq(m) for m in plan.mounts[len(plan.site.mounts):]]
        mounts = '"' + ",".join([*site, *user, SUBMIT_MOUNT.strip('"')]) + '"'
        words = ['--container-image="${CKIT_IMAGE}"', '--container-name="${ckit_container}"',
                 f"--container-mounts={mounts}", f"--container-workdir={workdir_word(plan)}"]
        if exports:
            words.append("--container-env=" + q(",".join(exports)))
        return words


BACKENDS = (Pyxis(),)
