"""podman run per task (this machine's test site): the submit folder mounted, the command run as given."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..shell import q, qv
from . import RuntimeBackend, mount_words, workdir_word

if TYPE_CHECKING:
    from ..model import LaunchPlan


class Podman(RuntimeBackend):
    name = "podman"
    summary = "podman run of an image reference on each node"
    order = 30
    refs = True

    def task_words(self, plan: LaunchPlan, exports: Sequence[str], tty: bool = False) -> list[str]:
        # --entrypoint= : the command runs as given, as with `singularity exec` and pyxis.
        words = ["podman", "run", "--rm", *(["--interactive", "--tty"] if tty else []),
                 *(q(f) for f in plan.runtime.flags), "--entrypoint="]
        if plan.gpus_per_node:
            words += ["--device", "nvidia.com/gpu=all"]
        mounts = mount_words(plan)
        code = mounts.pop() if plan.code else None  # after the submit folder: it wins where they overlap
        for mount in [*mounts, '"${SLURM_SUBMIT_DIR}:${SLURM_SUBMIT_DIR}"', *([code] if code else [])]:
            words += ["--volume", mount]
        words += ["--workdir", workdir_word(plan), "--env", q("SLURM_*")]
        for name in exports:
            words += ["--env", name]
        return [*words, qv("CKIT_IMAGE")]


BACKENDS = (Podman(),)
