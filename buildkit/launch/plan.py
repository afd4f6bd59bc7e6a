"""From a user request and a site profile to a fully resolved, checked :class:`LaunchPlan` (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ..errors import ConfigError
from ..site.model import Partition, Runtime, Site
from ..site.policy import enforce
from .shell import ENV_NAME, check_sbatch_value, time_minutes

FRAMEWORKS = ("none", "horovod", "ddp", "tf", "mindspore", "ray", "nccl-tests")
LAUNCHERS = {"horovod": ("srun", "horovodrun"), "ddp": ("srun", "torchrun"), "mindspore": ("rank-table", "msrun")}
PER_NODE = {("horovod", "horovodrun"), ("ddp", "torchrun"), ("mindspore", "rank-table"), ("mindspore", "msrun"),
            ("tf", None), ("ray", None), ("nccl-tests", None)}
RANK_TABLES = ("v1", "legacy")
_PATH_SUFFIXES = (".sif", ".sqsh", ".squashfs", ".simg", ".img")
_STACK = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_MOUNT_PATH = re.compile(r"^/[^,:\n]*$")


@dataclass(frozen=True)
class LaunchRequest:
    """What the user asked for; None means "the site's default"."""

    command: tuple[str, ...]
    image: str | None = None
    framework: str = "none"
    launcher: str | None = None
    rank_table: str = "v1"
    nodes: int = 1
    gpus_per_node: int | None = None
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    comment: str | None = None
    name: str = "ckit"
    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[str, ...] = ()
    runtime: str | None = None
    gloo: bool = False
    network_interface: str | None = None
    devices_per_node: int | None = None


@dataclass(frozen=True)
class Image:
    """The image to run: ``kind`` is path (a local file), ref (a registry reference) or stack (staged by ckit)."""

    kind: str
    value: str

    @property
    def is_registry(self) -> bool:
        return self.kind == "ref"


@dataclass(frozen=True)
class LaunchPlan:
    site: Site
    request: LaunchRequest
    partition: Partition | None
    runtime: Runtime
    image: Image | None
    framework: str
    launcher: str | None
    nodes: int
    gpus_per_node: int
    tasks_per_node: int
    cpus_per_task: int
    time: str | None
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    @property
    def total_tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def classify_image(value: str, site: Site, runtime: Runtime) -> Image:
    """A local file path, a ckit stack name (found in the site's shared image folder) or a registry reference."""
    if "\n" in value or not value.strip():
        raise ConfigError(f"--image {value!r} is not an image", hint="give a path, a registry reference or a stack name")
    if value.startswith(("/", "./", "../", "~")) or value.endswith(_PATH_SUFFIXES):
        return Image("path", value)
    from ..cachedir.lookup import find_staged

    # a stack, or a reference `ckit stage` staged: the file in the site's shared image folder, found by its index
    staged = find_staged(value, runtime=runtime.kind, shared_dir=site.shared_image_dir,
                         compressions=site.squashfs_compressions, site=site.name, stack=bool(_STACK.fullmatch(value)))
    if staged is not None:
        return Image("path", staged)
    return Image("ref", value.removeprefix("docker://"))


def _default_tasks(framework: str, launcher: str | None, gpus: int) -> int:
    if (framework, launcher) in PER_NODE:
        return 1
    return max(gpus, 1)


def _default_cpus(site: Site, part: Partition | None, gpus: int, tasks: int) -> int:
    if gpus and site.policy.cpus_per_gpu:
        return max(site.policy.cpus_per_gpu * gpus // tasks, 1)
    if gpus and part and part.cpus_per_node and part.gpus_per_node:
        return max(part.cpus_per_node // part.gpus_per_node * gpus // tasks, 1)
    return 1


def _check_request(req: LaunchRequest) -> None:
    if req.framework not in FRAMEWORKS:
        raise ConfigError(f"--framework {req.framework!r} is unknown", hint=f"one of: {', '.join(FRAMEWORKS)}")
    if req.launcher and req.launcher not in LAUNCHERS.get(req.framework, ()):
        choices = LAUNCHERS.get(req.framework)
        raise ConfigError(f"--launcher {req.launcher} does not apply to --framework {req.framework}",
                          hint=f"one of: {', '.join(choices)}" if choices else "drop --launcher")
    if req.rank_table not in RANK_TABLES:
        raise ConfigError(f"--rank-table {req.rank_table!r} is unknown", hint="v1 (MindSpore >= 1.x) or legacy (0.x)")
    for flag, value in [("--nodes", req.nodes), ("--gpus-per-node", req.gpus_per_node),
                        ("--tasks-per-node", req.tasks_per_node), ("--cpus-per-task", req.cpus_per_task)]:
        if value is not None and (value < (0 if flag == "--gpus-per-node" else 1)):
            raise ConfigError(f"{flag} {value} is out of range", hint=f"give a positive {flag}")
    check_sbatch_value("--name", req.name)
    for flag, value in [("--partition", req.partition), ("--account", req.account), ("--comment", req.comment)]:
        if value is not None:
            check_sbatch_value(flag, value)
    if req.time is not None:
        time_minutes(req.time)
    for key, _ in req.env:
        if not ENV_NAME.fullmatch(key):
            raise ConfigError(f"--env {key!r}: not a variable name", hint="use letters, digits and _ (K=V)")
    for mount in req.mounts:
        parts = mount.split(":")
        if len(parts) not in (2, 3) or not all(_MOUNT_PATH.fullmatch(p) for p in parts[:2]) or \
                (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise ConfigError(f"--mount {mount!r} is not SRC:DST[:ro|rw] with absolute paths",
                              hint="absolute paths without ',' or ':', e.g. --mount /data:/data:ro")
    if req.network_interface is not None:
        check_sbatch_value("--network-interface", req.network_interface)
    if not req.command and req.framework not in ("nccl-tests",):
        raise ConfigError("no command given", hint="add it after --: ckit launch … -- python train.py")


def plan_launch(site: Site, request: LaunchRequest) -> LaunchPlan:
    """Resolve defaults from the site, check the request and the site's rules. Raises ConfigError/PolicyError."""
    _check_request(request)
    part = None
    if site.scheduler == "slurm":
        part = site.partition(request.partition)
        if part is None:
            from ..config.searchpath import suggest
            raise ConfigError(f"{site.name} has no partition '{request.partition}'",
                              hint=suggest(request.partition or "", [p.name for p in site.partitions]))
    runtime_kind = request.runtime or (site.runtimes[0].kind if request.image else "none")
    runtime = site.runtime(runtime_kind)
    if runtime is None:
        raise ConfigError(f"{site.name} has no runtime '{runtime_kind}'",
                          hint=f"one of: {', '.join(r.kind for r in site.runtimes)}")
    if runtime.kind == "none" and request.image and site.scheduler != "dlws":
        raise ConfigError(f"--runtime none cannot run --image {request.image}",
                          hint=f"drop --image or use one of: {', '.join(r.kind for r in site.runtimes if r.kind != 'none')}")
    if runtime.kind != "none" and not request.image:
        raise ConfigError(f"--runtime {runtime.kind} needs --image", hint="add --image REF|PATH|STACK")
    image = classify_image(request.image, site, runtime) if request.image else None
    if image and site.scheduler == "dlws":
        image = Image("ref", request.image)
    if image and runtime.kind == "podman" and image.kind != "ref":
        raise ConfigError(f"podman runs image references, not files: {request.image}",
                          hint="give a reference such as localhost/busybox:1.36")
    launcher = request.launcher or (LAUNCHERS[request.framework][0] if request.framework in LAUNCHERS else None)
    if site.scheduler == "dlws" and request.framework == "horovod":
        launcher = "horovodrun"
    if launcher == "horovodrun" and runtime.kind == "pyxis":
        raise ConfigError("horovodrun cannot start pyxis containers on the other nodes",
                          hint="use --launcher srun (one task per GPU, the site's --mpi plugin)")
    gpus = request.gpus_per_node if request.gpus_per_node is not None else (part.gpus_per_node if part else 0)
    tasks = request.tasks_per_node or _default_tasks(request.framework, launcher, gpus)
    cpus = request.cpus_per_task or _default_cpus(site, part, gpus, tasks)
    plan = LaunchPlan(site=site, request=request, partition=part, runtime=runtime, image=image,
                      framework=request.framework, launcher=launcher, nodes=request.nodes, gpus_per_node=gpus,
                      tasks_per_node=tasks, cpus_per_task=cpus, time=request.time, command=request.command,
                      env=request.env, mounts=site.mounts + request.mounts)
    return replace(plan, warnings=enforce(plan))
