"""Pyxis/enroot: the container flags on each ``srun`` (never on ``#SBATCH`` lines: the batch script itself would
run in the image, without srun).

Where the site's Pyxis starts a step straight from the squashfs (profile ``squashfuse: true``: plugstack.conf's
``use_squashfuse=1``; for a registry image also an ``importer:``, Pyxis 0.24 and newer), the steps run unnamed:
Pyxis does that only for a container without ``--container-name``, and then nothing is unpacked on any node (each
step mounts the file with squashfuse under an overlay, and nothing is left to remove). Otherwise the container is
named per job (``ckit-$SLURM_JOB_ID``), unpacked once per node, shared by the job's steps and removed from every
node when the job ends; a node where that fails says so in the job's output, and the job's exit code stays the
program's. ``--keep-container`` keeps it for later jobs under a name that follows the image: the file's size,
mtime and inode, or the reference's pinned digest, so a replaced image is never run from a stale container. The
script's first lines say which of these starts the job takes (``ckit launch --dry-run`` shows them).

enroot starts the command through a login shell unless ``ENROOT_LOGIN_SHELL`` says no, and the ``/etc/profile`` of
a Debian or Ubuntu image resets PATH there: the job says no (Pyxis passes the job's variables on to enroot, all but
its folders), so the image's ENV reaches the program as podman and singularity give it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...site import compat
from ..shell import escape_dq, expand_quote, q
from . import SUBMIT_MOUNT, RuntimeBackend, code_mount, workdir_word

if TYPE_CHECKING:
    from ..model import LaunchPlan

_KEY_OF_FILE = "stat -L -c '%n %s %Y %i' \"${CKIT_IMAGE}\" | sha256sum | cut -c 1-12"
_KEY_OF_REF = "printf '%s' \"${CKIT_IMAGE}\" | sha256sum | cut -c 1-12"
_LOGIN_SHELL = (
    "# Without a login shell, whose /etc/profile resets PATH in Debian and Ubuntu images, the image's PATH and",
    "# the rest of its ENV reach the program (Pyxis passes this variable on to enroot).",
    "export ENROOT_LOGIN_SHELL=no")
# Each node removes its copy with enroot as Pyxis runs it (enroot.conf, not the job's ENROOT_* folders, says where
# containers are); a node where the container stays says so in the job's output.
_REMOVE = (
    "# The job's container is removed from every node when the job ends (enroot names it pyxis_NAME,",
    "# or pyxis_JOBID_NAME with container_scope=job, which pyxis removes itself). A node where that fails",
    "# says so below; the job's exit code stays the program's.",
    "ckit_remove_container() {",
    "  srun --export=ALL --ntasks-per-node=1 --kill-on-bad-exit=0 sh -c '",
    '    left() { echo "ckit: warning: container $1 is left on $(hostname): $2" >&2; exit 1; }',
    '    command -v enroot >/dev/null || left "$1" "enroot is not on the PATH of the job ($PATH); remove it there'
    ' with: enroot remove --force $1"',
    "    unset ENROOT_DATA_PATH ENROOT_RUNTIME_PATH ENROOT_LIBRARY_PATH ENROOT_SYSCONF_PATH",
    '    enroot list | grep -qxF "$1" || exit 0',
    '    out=$(enroot remove --force "$1" 2>&1) || left "$1" "enroot remove: $out"',
    '  \' ckit-remove "pyxis_${ckit_container}" || true',
    "}",
    "trap ckit_remove_container EXIT")


def pyxis_ref(ref: str) -> str:
    """A registry reference in pyxis's ``REGISTRY#IMAGE`` form (nvcr.io/nvidia/x:1 → nvcr.io#nvidia/x:1)."""
    if "#" in ref:
        return ref
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return ref


def start_path(plan: LaunchPlan) -> tuple[bool, str]:
    """Whether Pyxis starts the job's steps straight from the squashfs (unnamed), and how it starts them, in words
    (a comment of the script): what the site's profile says its Pyxis can do, for this image."""
    runtime, image = plan.runtime, plan.image
    ref = image is not None and image.kind == "ref"
    served = f"the .sqsh the site's importer ({runtime.importer}) serves" if runtime.importer else ""
    what = served if ref else "the .sqsh"
    if plan.request.keep_container:
        how = f"enroot create unpacks {what}" if what else "enroot import and enroot create unpack the image"
        return False, f"{how} once per node into a container kept for later jobs (--keep-container)"
    if runtime.squashfuse and what and (not ref or compat.pyxis_starts_from_importer(runtime.version)):
        return True, f"straight from {what} (use_squashfuse=1: squashfuse and an overlay on each node), every " \
                     "step unnamed, nothing unpacked"
    shared = "on each node, once per job: its steps share container ckit-JOBID"
    if not what:
        return False, f"enroot import (download, unpack, squash) and enroot create (unpack) {shared} (no importer: " \
                      "in the site's profile)"
    why = "no squashfuse: true in the site's profile" if not runtime.squashfuse else \
        f"Pyxis {runtime.version} starts an importer's file directly only from 0.24"
    return False, f"enroot create unpacks {what} {shared} ({why})"


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
        direct, how = start_path(plan)
        said = (f"# Pyxis start: {how}", *_LOGIN_SHELL)
        if direct:
            return said
        if not plan.request.keep_container:
            return (*said, "", 'ckit_container="ckit-${SLURM_JOB_ID}"', *_REMOVE)
        assert plan.image is not None
        key = _KEY_OF_REF if plan.image.kind == "ref" else _KEY_OF_FILE
        return (*said, "", f'ckit_container="ckit-$({key})"')

    def srun_words(self, plan: LaunchPlan, exports: Sequence[str]) -> list[str]:
        # one double-quoted word: site mounts may name $USER, the user's stay literal
        site = [expand_quote(m)[1:-1] for m in plan.site.mounts]
        user = [escape_dq(m) for m in plan.mounts[len(plan.site.mounts):]]
        code = [expand_quote(c)[1:-1] for c in [code_mount(plan)] if c]
        mounts = '"' + ",".join([*site, *user, SUBMIT_MOUNT.strip('"'), *code]) + '"'
        named = [] if start_path(plan)[0] else ['--container-name="${ckit_container}"']
        words = ['--container-image="${CKIT_IMAGE}"', *named,
                 f"--container-mounts={mounts}", f"--container-workdir={workdir_word(plan)}"]
        if exports:
            words.append("--container-env=" + q(",".join(exports)))
        return words


BACKENDS = (Pyxis(),)
