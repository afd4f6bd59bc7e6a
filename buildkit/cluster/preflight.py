"""Checks before a job is queued (``ckit launch`` unless ``--no-preflight``), each answered on this machine in
seconds where the queue would answer in hours: the conda environment exists, the modules load, a relative program
path exists where the tasks start (the submit folder or the image), the image file is readable, and a job that
puts several GPUs on one node states how many tasks it starts. Every failure is named with its fix (exit 2)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ConfigError
from ..launch.model import LaunchPlan
from ..launch.shell import q
from ..process import run, which


def problems(plan: LaunchPlan, cwd: Path) -> list[str]:
    """Every check that fails, one message each with its fix (empty: the job may be queued)."""
    out = []
    for check in (_conda, _modules, _program, _image, _tasks):
        message = check(plan, cwd)
        if message:
            out.append(message)
    return out


def check(plan: LaunchPlan, cwd: Path) -> None:
    """Raise one ConfigError (exit 2) naming every failed check."""
    found = problems(plan, cwd)
    if found:
        raise ConfigError(found[0] if len(found) == 1 else f"{len(found)} preflight checks failed:\n  "
                          + "\n  ".join(found), hint="fix them, or queue the job anyway with --no-preflight")


def _conda(plan: LaunchPlan, cwd: Path) -> str | None:
    name = plan.conda
    if not name:
        return None
    if "/" in name:
        return None if Path(name).expanduser().is_dir() else \
            f"--conda {name}: no such folder here (preflight): give an environment's name or its folder"
    if which("conda") is None:
        return None  # a module loads conda in the job: nothing here to ask
    listed = run(["conda", "env", "list"], step="list the conda environments", check=False, timeout=60)
    names = {line.split()[0] for line in listed.stdout.splitlines() if line.strip() and not line.startswith("#")}
    names |= {Path(line.split()[-1]).name for line in listed.stdout.splitlines() if line.strip()
              and not line.startswith("#")}
    if listed.returncode == 0 and name not in names:
        return (f"--conda {name}: conda knows no such environment (preflight; it has {', '.join(sorted(names))}): "
                f"create it (conda create -n {name} …) or name another")
    return None


def _modules(plan: LaunchPlan, cwd: Path) -> str | None:
    if not plan.modules:
        return None
    from ..launch.schedulers.slurm import MODULE_INIT
    from ..launch.steps import job_env

    # the job's literal variables first, as its script exports them before loading (--env MODULEPATH=…)
    exports = [f"export {name}={q(value)}" for name, value in job_env(plan)[0]]
    script = "\n".join([*exports, *MODULE_INIT, "type module >/dev/null 2>&1 || exit 3",
                        f"module load {' '.join(q(m) for m in plan.modules)} || exit 4",
                        "module list 2>&1"])
    done = run(["bash", "-c", script], step="load the job's modules", check=False, timeout=120)
    if done.returncode == 3:
        return None  # no module command on this machine: the nodes may have one
    failed = done.returncode != 0 or any(w in (done.stderr + done.stdout).lower()
                                         for w in ("unable to locate", "failed to load", "error:"))
    if failed:
        said = " ".join((done.stderr or done.stdout).split())[-300:]
        return (f"module load {' '.join(plan.modules)} failed here (preflight): {said}: check the names with "
                "`module avail` (or `module spider NAME`)")
    return None


def _program(plan: LaunchPlan, cwd: Path) -> str | None:
    """A relative program path (build/x, ./build/all_reduce_perf) must exist where the tasks start."""
    program = plan.command[0] if plan.command else ""
    if not program or program.startswith(("/", "$", "~")) or "/" not in program:
        return None
    start = Path(plan.request.workdir) if plan.request.workdir else cwd
    if (start / program).exists():
        return None
    in_image = _in_image(plan, start / program)
    if in_image is not False:
        return None  # in the image, or an image ckit cannot look into here
    where = f"{start} (--workdir) nor in the image" if plan.request.workdir else f"the submit folder {start}"
    return (f"program {program} is not in {where} (preflight): the tasks start there; build it first or give "
            "its absolute path")


def _in_image(plan: LaunchPlan, path: Path) -> bool | None:
    """Whether the image file holds ``path`` (None: no image file here to look into)."""
    image = plan.image
    if image is None or image.kind != "path" or not image.value.endswith((".sif", ".sqsh", ".squashfs")):
        return None if image is not None else False
    from ..image import inspect

    file = Path(image.value).expanduser()
    if not file.is_file() or which("unsquashfs") is None:
        return None
    offset = inspect.squashfs_offset(file)
    if offset is None:
        return None
    reader = inspect.SquashReader(file, offset)
    return str(path) in reader.listdir(str(path.parent))


def _image(plan: LaunchPlan, cwd: Path) -> str | None:
    image = plan.image
    if image is None or image.kind != "path" or image.value.startswith("$"):
        return None
    file = Path(image.value).expanduser()
    if not file.is_file():
        return f"--image {image.value}: no such file here (preflight): the nodes read it at this path"
    if not os.access(file, os.R_OK):
        return f"--image {image.value}: not readable (preflight): chmod a+r it, or stage it where the nodes read"
    return None


def _tasks(plan: LaunchPlan, cwd: Path) -> str | None:
    """Several GPUs on a node and no launcher that starts a process per GPU: how many tasks is the user's call."""
    req = plan.request
    if plan.framework == "none" and plan.gpus_per_node > 1 and req.tasks_per_node is None:
        return (f"{plan.gpus_per_node} GPUs per node and no --ntasks-per-node (preflight): ckit would start "
                f"{plan.tasks_per_node} tasks per node; state it (--ntasks-per-node {plan.gpus_per_node} for one "
                "process per GPU, 1 for a program that drives them all)")
    return None
