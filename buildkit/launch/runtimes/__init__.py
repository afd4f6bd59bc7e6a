"""Runtimes: how one task starts the program (inside a container or directly). One module per runtime.

A runtime declares which images it runs (files by suffix, registry references), the words it puts on the
``srun`` line (pyxis) or before the program (singularity/apptainer, podman), and the batch-level lines it needs.
Every runtime starts the tasks in the submit folder (``--workdir`` changes it) and runs the command as given:
no image entrypoint or runscript re-reads the arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...errors import ConfigError
from ..backend import Registry
from ..shell import expand_quote, q

if TYPE_CHECKING:
    from ...site.model import Site
    from ..model import Image, ImageFacts, LaunchPlan, LaunchRequest

SUBMIT_DIR = '"${SLURM_SUBMIT_DIR}"'
SUBMIT_MOUNT = '"${SLURM_SUBMIT_DIR}:${SLURM_SUBMIT_DIR}"'  # mounted at its own path, as singularity does


class RuntimeBackend:
    name = ""
    summary = ""
    order = 50
    files: tuple[str, ...] = ()  # image file suffixes it runs
    refs = False  # runs registry references
    artifact = ""  # what `ckit convert --to` makes for it
    host_envs = False  # a host venv/conda reaches the program

    def check(self, site: Site, req: LaunchRequest, image: Image | None, facts: ImageFacts) -> None:
        """Refuse an image this runtime cannot run (exit 2, with the fix)."""
        if image is None:
            raise ConfigError(f"--runtime {self.name} needs --image", hint="add --image REF|PATH|STACK")
        if image.kind == "ref" and not self.refs:
            raise ConfigError(f"--runtime {self.name} runs image files, not the reference {image.value}",
                              hint=f"make one: ckit convert docker://{image.value} --to {self.artifact} --site {site.name}")
        if image.kind in ("path", "stack") and not image.value.endswith(self.files):
            if not self.files:
                raise ConfigError(f"--runtime {self.name} runs image references, not files: {image.value}",
                                  hint="give a reference such as localhost/busybox:1.36")
            raise ConfigError(f"--runtime {self.name} cannot run {image.value}: it runs {', '.join(self.files)} files",
                              hint=f"convert it: ckit convert … --to {self.artifact} --site {site.name}")
        why = site.refusal(self.artifact, facts.compression) if facts.compression else None
        if why:
            raise ConfigError(f"{image.value} is {facts.compression}-compressed; {why}",
                              hint=f"rebuild it for the site: ckit convert SOURCE --to {self.artifact} --site "
                                   f"{site.name} (or ckit build STACK --site {site.name})")

    def check_plan(self, plan: LaunchPlan) -> None:
        if plan.request.keep_container and self.name != "pyxis":
            raise ConfigError(f"--keep-container is for pyxis, not --runtime {self.name}",
                              hint="drop --keep-container")
        if (plan.venv or plan.conda) and not self.host_envs:
            raise ConfigError(f"--venv/--conda activate a host environment, which does not reach inside "
                              f"--runtime {self.name}", hint="install the packages in the image, or use --runtime none")

    def image_word(self, plan: LaunchPlan) -> str | None:
        """The image as shell text for ``export CKIT_IMAGE=…`` (None: no image)."""
        image = plan.image
        if image is None:
            return None
        if image.kind == "stack":
            return expand_quote(image.value)
        if image.value.startswith("~"):
            return expand_quote("$HOME" + image.value[1:])
        return q(image.value)

    def setup(self, plan: LaunchPlan) -> tuple[str, ...]:
        """Batch-level lines before the first step."""
        return ()

    def srun_words(self, plan: LaunchPlan, exports: Sequence[str]) -> list[str]:
        """Options of every ``srun`` step (pyxis's container flags)."""
        return []

    def task_words(self, plan: LaunchPlan, exports: Sequence[str], tty: bool = False) -> list[str]:
        """The words before the program in each task (``singularity exec …``)."""
        return []

    def entry_word(self, plan: LaunchPlan) -> str | None:
        """A ``/bin/sh -c`` script word that runs the image's ENTRYPOINT before ``"$@"`` (None: the runtime runs
        the program as it is)."""
        return None

    def around_task(self, plan: LaunchPlan, inner: list[str]) -> list[str]:
        """The words run in the container per task (shell words), wrapped as the runtime needs them to live."""
        return inner


def mount_words(plan: LaunchPlan) -> list[str]:
    """Site mounts may name $USER/$HOME (expanded in the job); the user's --mount values stay verbatim."""
    site = [expand_quote(m) for m in plan.site.mounts]
    code = code_mount(plan)
    return site + [q(m) for m in plan.mounts[len(plan.site.mounts):]] + ([expand_quote(code)] if code else [])


def code_source(plan: LaunchPlan) -> str | None:
    """The job's copy of the ``--code`` folder, as the job names it (under the submit folder, which every node
    sees), or None."""
    return f"${{SLURM_SUBMIT_DIR}}/{plan.code.folder}" if plan.code else None


def code_mount(plan: LaunchPlan, read_only: bool = True) -> str | None:
    """``SRC:DEST[:ro]`` laying the job's copy of the code over the image (after every other mount, so that it
    wins where they overlap); None without ``--code``."""
    source = code_source(plan)
    if source is None or plan.code is None:
        return None
    return f"{source}:{plan.code.dest}" + (":ro" if read_only else "")


def workdir_word(plan: LaunchPlan) -> str:
    """Where the tasks start: --workdir, else the folder the job was submitted from."""
    return q(plan.request.workdir) if plan.request.workdir else SUBMIT_DIR


REGISTRY: Registry[RuntimeBackend] = Registry(__name__, __path__, "runtime")
