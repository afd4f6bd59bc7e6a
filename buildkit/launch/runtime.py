"""How one job step starts the program: singularity/apptainer, pyxis (srun --container-*), podman, or directly."""

from __future__ import annotations

from collections.abc import Sequence

from .plan import LaunchPlan
from .shell import expand_quote, q, qv

TASK_ARGV0 = "ckit-task"


def image_word(plan: LaunchPlan) -> str | None:
    """The image as the runtime wants it, as shell text for ``CKIT_IMAGE=…``."""
    image = plan.image
    if image is None:
        return None
    if image.kind == "stack":
        return expand_quote(image.value)
    if image.kind == "path":
        return q(image.value) if not image.value.startswith("~") else expand_quote("$HOME" + image.value[1:])
    if plan.runtime.kind in ("singularity", "apptainer"):
        return q(f"docker://{image.value}")
    if plan.runtime.kind == "pyxis":
        return q(pyxis_ref(image.value))
    return q(image.value)


def pyxis_ref(ref: str) -> str:
    """A registry reference in pyxis's ``REGISTRY#IMAGE`` form (nvcr.io/nvidia/x:1 → nvcr.io#nvidia/x:1)."""
    if "#" in ref:
        return ref
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return ref


def container_name(plan: LaunchPlan) -> str:
    """Pyxis container name: reused by every step and by later jobs of the same image, never across images."""
    import hashlib

    value = plan.image.value if plan.image else ""
    return f"{plan.request.name}-{hashlib.sha256(value.encode()).hexdigest()[:8]}"


def module_lines(plan: LaunchPlan) -> list[str]:
    modules = list(plan.site.modules)
    if plan.runtime.module:
        modules.append(plan.runtime.module)
    if not modules:
        return []
    return ["module purge", "module load " + " ".join(q(m) for m in modules)]


def _mount_words(plan: LaunchPlan) -> list[str]:
    """Site mounts may name $USER/$HOME (expanded in the job); the user's --mount values stay verbatim."""
    site = [expand_quote(m) for m in plan.site.mounts]
    return site + [q(m) for m in plan.mounts[len(plan.site.mounts):]]


def srun_prefix(plan: LaunchPlan, exports: Sequence[str], options: Sequence[str] = (), *, mpi: bool = False) -> list[str]:
    """``srun`` with the step's options and, for pyxis, the container flags (never on #SBATCH lines)."""
    words = ["srun"]
    if mpi and plan.site.mpi_plugin:
        words.append(f"--mpi={plan.site.mpi_plugin}")
    words += list(options)
    if plan.runtime.kind == "pyxis":
        words += ['--container-image="${CKIT_IMAGE}"', f"--container-name={container_name(plan)}"]
        if plan.mounts:
            words.append("--container-mounts=" + ",".join(_mount_words(plan)))
        if exports:
            words.append("--container-env=" + q(",".join(exports)))
    return words


def container_words(plan: LaunchPlan, exports: Sequence[str], *, wrapped: bool) -> list[str]:
    """The words that start the runtime (before the program), for runtimes that are called inside the task."""
    kind = plan.runtime.kind
    flags = [q(f) for f in plan.runtime.flags]
    if kind in ("singularity", "apptainer"):
        words = [q(plan.runtime.command or kind), "exec" if wrapped else "run", *flags]
        if plan.gpus_per_node:
            words.append("--nv")
        for mount in _mount_words(plan):
            words += ["--bind", mount]
        return [*words, qv("CKIT_IMAGE")]
    if kind == "podman":
        words = ["podman", "run", "--rm", *flags]
        if wrapped:  # the per-task glue runs instead of the image's ENTRYPOINT, as with `singularity exec`
            words.append("--entrypoint=")
        if plan.gpus_per_node:
            words += ["--device", "nvidia.com/gpu=all"]
        for mount in _mount_words(plan):
            words += ["--volume", mount]
        words += ["--env", q("SLURM_*")]
        for name in exports:
            words += ["--env", name]
        return [*words, qv("CKIT_IMAGE")]
    return []


def program(plan: LaunchPlan, exports: Sequence[str], words: Sequence[str], task_script: str | None = None) -> list[str]:
    """The runtime call plus the program; ``task_script`` (sh text using "$@") runs inside the container per task."""
    inner = list(words)
    if task_script is not None:
        inner = ["sh", "-c", q(task_script), TASK_ARGV0, *inner]
    return [*container_words(plan, exports, wrapped=task_script is not None), *inner]


def step(plan: LaunchPlan, exports: Sequence[str], words: Sequence[str], *, task_script: str | None = None,
         options: Sequence[str] = (), mpi: bool = False) -> str:
    """One ``srun`` line that runs ``words`` (already shell words) in every task of the step."""
    return " ".join([*srun_prefix(plan, exports, options, mpi=mpi), *program(plan, exports, words, task_script)])


def user_words(plan: LaunchPlan) -> list[str]:
    return [q(a) for a in plan.command]
