"""What a launch is made of: the user's request, the image it names, what was read from that image, and the
resolved plan (:mod:`.plan` makes it; the backends read it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..site.model import Partition, Runtime, Site
from .code import CodeTree


@dataclass(frozen=True)
class LaunchRequest:
    """What the user asked for; None means "the site's default"."""

    command: tuple[str, ...]
    image: str | None = None
    framework: str = "none"
    launcher: str | None = None
    rank_table: str | None = None
    nodes: int = 1
    gpus_per_node: int | None = None
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    mem: str | None = None  # sbatch's --mem (per node), --mem-per-cpu, --mem-per-gpu: at most one
    mem_per_cpu: str | None = None
    mem_per_gpu: str | None = None
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
    workdir: str | None = None
    modules: tuple[str, ...] = ()
    conda: str | None = None
    venv: str | None = None
    pre: tuple[str, ...] = ()
    output: str | None = None
    error: str | None = None
    mail_type: str | None = None
    mail_user: str | None = None
    keep_container: bool = False
    mpi: str | None = None
    array: str | None = None
    after: tuple[str, ...] = ()
    interactive: bool = False
    fetch: tuple[str, ...] = ()
    endpoints: tuple[str, ...] = ()
    code: str | None = None  # DIR[:DEST]: the code folder shipped with the job (code.py)


# The command line's spelling of each request field, for the messages that refuse one.
FLAGS = {"image": "--image", "launcher": "--launcher", "rank_table": "--rank-table", "nodes": "-N/--nodes",
         "gpus_per_node": "--gpus-per-node", "tasks_per_node": "--ntasks-per-node", "cpus_per_task": "-c/--cpus-per-task",
         "mem": "--mem", "mem_per_cpu": "--mem-per-cpu", "mem_per_gpu": "--mem-per-gpu",
         "time": "-t/--time", "partition": "-p/--partition", "account": "-A/--account", "comment": "--comment",
         "name": "-J/--job-name", "env": "--env", "mounts": "--mount", "runtime": "--runtime", "gloo": "--gloo",
         "network_interface": "--network-interface", "devices_per_node": "--devices-per-node",
         "workdir": "--workdir", "modules": "--module", "conda": "--conda", "venv": "--venv", "pre": "--pre",
         "output": "-o/--output", "error": "-e/--error", "mail_type": "--mail-type", "mail_user": "--mail-user",
         "keep_container": "--keep-container", "mpi": "--mpi", "array": "--array", "after": "--after",
         "interactive": "--interactive", "fetch": "--fetch", "endpoints": "--endpoint",
         "code": "--code"}


def given(request: LaunchRequest, name: str) -> bool:
    """Whether the user set the field ``name`` (it differs from its default)."""
    default = LaunchRequest.__dataclass_fields__[name].default
    return bool(getattr(request, name) != default)


@dataclass(frozen=True)
class Image:
    """The image to run: ``kind`` is path (a file), ref (a registry reference) or stack (staged by ckit)."""

    kind: str
    value: str

    @property
    def is_registry(self) -> bool:
        return self.kind == "ref"


@dataclass(frozen=True)
class ImageFacts:
    """What the caller read from a local image file (the plan itself reads nothing)."""

    compression: str | None = None  # the squashfs compressor of a .sif/.sqsh found on this machine


@dataclass(frozen=True)
class JobVariables:
    """The variables a job defines, which ckit reads per task where ``$NAME`` names one in the command or an
    ``--env`` value (words.py). ``others`` are what other jobs define (a name, or a prefix ending in ``_``) with
    what defines them: naming one in this job is an error, since it would read as nothing."""

    names: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    others: tuple[tuple[str, str], ...] = ()

    def defines(self, name: str) -> bool:
        if name in self.names:
            return True
        return self.elsewhere(name) is None and name.startswith(self.prefixes)

    def elsewhere(self, name: str) -> str | None:
        """What defines ``name`` when this job does not (None: this job does, or no job does)."""
        if name in self.names:
            return None
        for key, who in self.others:
            if name == key or (key.endswith("_") and name.startswith(key)):
                return who
        return None


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
    modules: tuple[str, ...] = ()
    conda: str | None = None
    venv: str | None = None
    rank_table: str = "v1"
    code: CodeTree | None = None  # what --code ships, read when the launch was planned
    variables: JobVariables = field(default=JobVariables())
    warnings: tuple[str, ...] = field(default=())

    @property
    def total_tasks(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def name(self) -> str:
        return self.request.name

    @property
    def mpi_plugin(self) -> str | None:
        """srun's --mpi for MPI steps: --mpi, else the site's (``none``: srun's default)."""
        chosen = self.request.mpi or self.site.mpi_plugin
        return None if chosen == "none" else chosen


def env_pairs(env: Mapping[str, str] | Sequence[str] | Sequence[tuple[str, str]], flag: str = "--env"
              ) -> tuple[tuple[str, str], ...]:
    """``{"K": "V"}``, ``["K=V"]`` or ``[("K", "V")]`` as the request's pairs."""
    if isinstance(env, Mapping):
        return tuple((str(k), str(v)) for k, v in env.items())
    out = []
    for item in env:
        if isinstance(item, str):
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"{flag} {item!r} is not K=V", hint=f"write {flag} NAME=value")
            out.append((key, value))
        else:
            out.append((item[0], item[1]))
    return tuple(out)
