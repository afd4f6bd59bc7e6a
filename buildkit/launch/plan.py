"""From a user request and a site profile to a fully resolved, checked :class:`LaunchPlan` (pure).

The runtimes, frameworks and schedulers are named backends (see ``runtimes/``, ``frameworks/``,
``schedulers/``); the plan asks them what they accept and what they default to.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from ..config.searchpath import suggest
from ..errors import ConfigError
from ..site.model import Partition, Runtime, Site
from . import words
from .code import CodeTree
from .model import FLAGS as FLAGS
from .model import Image as Image
from .model import ImageFacts as ImageFacts
from .model import JobVariables
from .model import LaunchPlan as LaunchPlan
from .model import LaunchRequest as LaunchRequest
from .model import given as given
from .shell import ENV_NAME, check_sbatch_value, time_minutes

RANK_TABLES = ("v1", "legacy")
_PATH_SUFFIXES = (".sif", ".sqsh", ".squashfs", ".simg", ".img")
_STACK = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_MOUNT_PATH = re.compile(r"^/[^,:\n]*$")
_LOG_PATH = re.compile(r"^[A-Za-z0-9._%/+-][A-Za-z0-9._%/+=-]*$")
_MAIL_TYPES = ("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT", "TIME_LIMIT",
               "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS")
_MAIL_USER = re.compile(r"^[A-Za-z0-9._%+-]+(@[A-Za-z0-9.-]+)?$")
_MODULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+/-]*$")
_ARRAY = re.compile(r"^\d+(-\d+(:\d+)?)?(,\d+(-\d+(:\d+)?)?)*(%\d+)?$")
_MEMORY = re.compile(r"^[0-9]+[KMGT]?B?$")
MEMORY = ("mem", "mem_per_cpu", "mem_per_gpu")
_JOB_ID = re.compile(r"^\d+(_\d+)?$")
ENDPOINTS = ("ssh", "jupyter", "tensorboard")


def names_a_file(value: str) -> bool:
    """``--image`` names a file (not a registry reference or a stack): a path, or a name with an image suffix."""
    return value.startswith(("/", "./", "../", "~")) or value.endswith(_PATH_SUFFIXES)


def classify_image(value: str, site: Site, runtime: Runtime) -> Image:
    """A local file path, a ckit stack name (found in the site's shared image folder, in the format the runtime
    runs) or a registry reference."""
    if "\n" in value or not value.strip():
        raise ConfigError(f"--image {value!r} is not an image", hint="give a path, a registry reference or a stack name")
    if names_a_file(value):
        return Image("path", value)
    # lazy for start-up time (docs/design.md): the CLI imports this module for --help
    from ..storage.lookup import find_staged
    from .runtimes import REGISTRY

    target = REGISTRY.get(runtime.kind, "--runtime").artifact or None
    # a stack, or a reference `ckit stage` staged: the file in the site's shared image folder, found by its index
    staged = find_staged(value, runtime=runtime.kind, target=target, shared_dir=site.shared_image_dir,
                         compressions=site.compressions(target) if target else site.squashfs_compressions,
                         site=site.name, stack=bool(_STACK.fullmatch(value)))
    if staged is not None:
        return Image("path", staged)
    return Image("ref", value.removeprefix("docker://"))


# A request's fields checked before anything is resolved, one rule per field or pair of fields, in the order
# the first broken one is reported; each raises a ConfigError naming the flag and the fix.
def _rank_table(req: LaunchRequest) -> None:
    if req.rank_table is not None and req.rank_table not in RANK_TABLES:
        raise ConfigError(f"--rank-table {req.rank_table!r} is unknown", hint="v1 (MindSpore >= 1.x) or legacy (0.x)")


def _counts(req: LaunchRequest) -> None:
    for flag, value in [("--nodes", req.nodes), ("--gpus-per-node", req.gpus_per_node),
                        ("--tasks-per-node", req.tasks_per_node), ("--cpus-per-task", req.cpus_per_task),
                        ("--devices-per-node", req.devices_per_node)]:
        if value is not None and (value < (0 if flag == "--gpus-per-node" else 1)):
            raise ConfigError(f"{flag} {value} is out of range", hint=f"give a positive {flag}")


def _sbatch_words(req: LaunchRequest) -> None:
    check_sbatch_value("--name", req.name)
    for flag, value in [("--partition", req.partition), ("--account", req.account), ("--comment", req.comment),
                        ("--network-interface", req.network_interface), ("--mpi", req.mpi)]:
        if value is not None:
            check_sbatch_value(flag, value)
    if req.time is not None:
        time_minutes(req.time)


def _logs(req: LaunchRequest) -> None:
    for flag, value in [("--output", req.output), ("--error", req.error)]:
        if value is not None and not _LOG_PATH.fullmatch(value):
            raise ConfigError(f"{flag} {value!r}: a log file name without spaces or shell characters",
                              hint=f"e.g. {flag} %x-%j.log (sbatch's %j job id, %x job name, %N node)")
        if value is not None and "/" in value and re.search(r"%(?![xu%])", value.rsplit("/", 1)[0]):
            raise ConfigError(f"{flag} {value!r}: its folder names something only the job knows; Slurm opens the "
                              "log before the job starts and creates no folder, so ckit makes it first",
                              hint=f"keep %j and the like in the file name: {flag} out/%x.o%j")


def _memory(req: LaunchRequest) -> None:
    given_memory = [name for name in MEMORY if getattr(req, name) is not None]
    for name in given_memory:
        value = getattr(req, name)
        if not _MEMORY.fullmatch(value):  # 0: all of the node's (sbatch's meaning)
            raise ConfigError(f"{FLAGS[name]} {value!r} is not an amount of memory",
                              hint=f"as sbatch takes it: a number with K, M (the default), G or T, e.g. {FLAGS[name]} 10G")
    if len(given_memory) > 1:
        raise ConfigError(" and ".join(FLAGS[n] for n in given_memory) + " ask for memory twice; sbatch takes one",
                          hint="keep one of them: --mem per node, --mem-per-cpu or --mem-per-gpu")


def _array(req: LaunchRequest) -> None:
    if req.array is not None and not _ARRAY.fullmatch(req.array):
        raise ConfigError(f"--array {req.array!r} is not sbatch's index list",
                          hint="e.g. --array 0-9, --array 1,3,5 or --array 0-99%10 (at most 10 at once)")


def _after(req: LaunchRequest) -> None:
    for job in req.after:
        if not _JOB_ID.fullmatch(job):
            raise ConfigError(f"--after {job!r} is not a job id", hint="e.g. --after 12345 (repeat it for more)")


def _endpoints(req: LaunchRequest) -> None:
    for endpoint in req.endpoints:
        if endpoint not in ENDPOINTS:
            raise ConfigError(f"--endpoint {endpoint!r} is not one of the platform's", hint=", ".join(ENDPOINTS))


def _interactive(req: LaunchRequest) -> None:
    if req.interactive and req.array:
        raise ConfigError("--interactive opens one allocation; --array submits many jobs", hint="drop one of them")


def _mail(req: LaunchRequest) -> None:
    if req.mail_type is not None and not all(t in _MAIL_TYPES for t in req.mail_type.split(",")):
        raise ConfigError(f"--mail-type {req.mail_type!r} is not sbatch's", hint=f"one or more of: {', '.join(_MAIL_TYPES)}")
    if req.mail_user is not None and not _MAIL_USER.fullmatch(req.mail_user):
        raise ConfigError(f"--mail-user {req.mail_user!r} is not a mail address or user name",
                          hint="e.g. --mail-user alice@example.org")


def _env(req: LaunchRequest) -> None:
    for key, _ in req.env:
        if not ENV_NAME.fullmatch(key):
            raise ConfigError(f"--env {key!r}: not a variable name", hint="use letters, digits and _ (K=V)")


def _mounts(req: LaunchRequest) -> None:
    for mount in req.mounts:
        parts = mount.split(":")
        if len(parts) not in (2, 3) or not all(_MOUNT_PATH.fullmatch(p) for p in parts[:2]) or \
                (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise ConfigError(f"--mount {mount!r} is not SRC:DST[:ro|rw] with absolute paths",
                              hint="absolute paths without ',' or ':', e.g. --mount /data:/data:ro")


def _workdir(req: LaunchRequest) -> None:
    if req.workdir is not None and not _MOUNT_PATH.fullmatch(req.workdir):
        raise ConfigError(f"--workdir {req.workdir!r} is not an absolute path",
                          hint="the folder the tasks start in, e.g. --workdir /code")


def _modules(req: LaunchRequest) -> None:
    for module in req.modules:
        if not _MODULE.fullmatch(module):
            raise ConfigError(f"--module {module!r} is not a module name", hint="e.g. --module cuda/11.4")


def _lines(req: LaunchRequest) -> None:
    for flag, line in [("--conda", req.conda), ("--venv", req.venv), *(("--pre", p) for p in req.pre),
                       *(("--fetch", f) for f in req.fetch)]:
        if line is not None and ("\n" in line or "\0" in line or not line.strip()):
            raise ConfigError(f"{flag} {line!r}: one non-empty line", hint=f"repeat {flag} for more" if
                              flag in ("--pre", "--fetch") else f"give the {flag.lstrip('-')} environment's name or path")


REQUEST_CHECKS: tuple[Callable[[LaunchRequest], None], ...] = (
    _rank_table, _counts, _sbatch_words, _logs, _memory, _array, _after, _endpoints, _interactive, _mail, _env,
    _mounts, _workdir, _modules, _lines)


def _check_request(req: LaunchRequest) -> None:
    for check in REQUEST_CHECKS:
        check(req)


def _resources(site: Site, part: Partition | None, req: LaunchRequest, per_node: bool) -> tuple[int, int, int]:
    gpus = req.gpus_per_node if req.gpus_per_node is not None else (part.gpus_per_node if part else 0)
    tasks = req.tasks_per_node or (1 if per_node else max(gpus, 1))
    if req.cpus_per_task:
        return gpus, tasks, req.cpus_per_task
    cpus = 1
    if gpus and site.policy.cpus_per_gpu:
        cpus = max(site.policy.cpus_per_gpu * gpus // tasks, 1)
    elif gpus and part and part.cpus_per_node and part.gpus_per_node:
        cpus = max(part.cpus_per_node // part.gpus_per_node * gpus // tasks, 1)
    return gpus, tasks, cpus


def _partition(site: Site, req: LaunchRequest, uses_partitions: bool) -> Partition | None:
    if not uses_partitions:
        return None
    part = site.partition(req.partition)
    if part is None:
        retired = dict(site.retired_partitions).get(req.partition or "")
        raise ConfigError(f"{site.name} has no partition '{req.partition}'" + (f": {retired}" if retired else ""),
                          hint=suggest(req.partition or "", [p.name for p in site.partitions]) or
                          f"one of: {', '.join(p.name for p in site.partitions)}")
    return part


def runtime_kind(site: Site, req: LaunchRequest) -> str:
    """The runtime the job gets: --runtime, else the site's first for an image, else none."""
    return req.runtime or (site.runtimes[0].kind if req.image and site.runtimes else "none")


def _runtime(site: Site, req: LaunchRequest) -> Runtime:
    from . import runtimes

    kind = runtime_kind(site, req)
    runtime = site.runtime(kind)
    if runtime is None:
        raise ConfigError(f"{site.name} has no runtime '{kind}'",
                          hint=f"one of: {', '.join(r.kind for r in site.runtimes)}")
    runtimes.REGISTRY.get(runtime.kind, f"site {site.name} runtime")
    return runtime


def _check_code(request: LaunchRequest, code: CodeTree | None, runtime: str) -> None:
    """``--code`` came with the folder's contents (the caller reads them); DEST means nothing without a container."""
    if request.code is None:
        return
    from .code import parse

    if code is None:
        raise ConfigError(f"--code {request.code}: the folder was not read before the launch was planned",
                          hint="plan it with ckit.plan_launch(), which reads the folder")
    if runtime == "none" and parse(request.code)[1] is not None:
        raise ConfigError(f"--code {request.code}: --runtime none starts no container to lay the code over; the "
                          "tasks find the job's copy of the folder at $CKIT_CODE",
                          hint=f"--code {parse(request.code)[0]} (no :DEST), and name $CKIT_CODE in the command")


def job_variables(site: Site, request: LaunchRequest, framework: str, launcher: str | None) -> JobVariables:
    """What this job defines (words.py), and what only other jobs do: other frameworks' and launchers'
    variables, other schedulers' prefixes, the array's without --array."""
    from . import frameworks, schedulers

    own = frameworks.REGISTRY.get(framework, "--framework").variables.get(launcher, ())
    names = {*words.TASK_ENVIRONMENT, *own, *(k for k, _ in site.env), *(k for k, _ in request.env)}
    if request.code:  # ckit's own: where the job's copy of --code is, and which code it is
        names |= {"CKIT_CODE", "CKIT_CODE_DIGEST"}
    if request.image:
        names.add("CKIT_IMAGE")
    prefixes = schedulers.REGISTRY.get(site.scheduler, "scheduler").variable_prefixes
    setters: dict[str, list[str]] = {}
    for backend in frameworks.REGISTRY.all():
        for name in dict.fromkeys(n for defined in backend.variables.values() for n in defined):
            hows = [how for how, defined in backend.variables.items() if name in defined]
            setters.setdefault(name, []).append(f"--framework {backend.name}" + (
                "" if len(hows) == len(backend.variables) else f" --launcher {'|'.join(map(str, hows))}"))
    others = [(name, " or ".join(who)) for name, who in setters.items() if name not in names]
    others += [(prefix, f"a {backend.name} site's scheduler") for backend in schedulers.REGISTRY.all()
               for prefix in backend.variable_prefixes if prefix not in prefixes]
    if request.array is None:
        others.append(("SLURM_ARRAY_", "--array"))
    return JobVariables(frozenset(names), prefixes, tuple(others))


def check_words(plan: LaunchPlan) -> None:
    """Every --env value, site env value and argument in the job's grammar (words.py), before anything is written."""
    for key, value in plan.site.env:
        words.parse(value, f"site {plan.site.name} env {key}", plan.variables)
    for key, text in plan.env:
        words.parse(text, f"--env {key}", plan.variables)
    for index, arg in enumerate(plan.command):
        words.parse(arg, f"argument {index + 1} of the command", plan.variables)


def plan_launch(site: Site, request: LaunchRequest, facts: ImageFacts | None = None,
                code: CodeTree | None = None) -> LaunchPlan:
    """Resolve defaults from the site and the backends, check the request and the site's rules. ``code`` is
    what the ``--code`` folder holds (:func:`.code.scan`).

    Raises ConfigError (bad request) or PolicyError (a site rule), both exit 2."""
    from . import frameworks, runtimes, schedulers
    from .rules import enforce

    _check_request(request)
    scheduler = schedulers.REGISTRY.get(site.scheduler, f"site {site.name} scheduler")
    if request.interactive and not request.command:  # a terminal on the first node: the scheduler's shell
        request = replace(request, command=scheduler.shell_program)
    framework = frameworks.REGISTRY.get(request.framework, "--framework")
    scheduler.check_framework(site, framework.name)
    launcher = framework.launcher(request.launcher, scheduler.preferred_launchers.get(framework.name))
    part = _partition(site, request, scheduler.uses_partitions)
    runtime = _runtime(site, request)
    backend = runtimes.REGISTRY.get(runtime.kind, "--runtime")
    image = classify_image(request.image, site, runtime) if request.image else None
    image = scheduler.image(site, image)
    backend.check(site, request, image, facts or ImageFacts())
    if not request.command and framework.needs_command and not request.interactive:
        raise ConfigError("no command given", hint="add it after --: ckit launch … -- python train.py")
    gpus, tasks, cpus = _resources(site, part, request, framework.one_task_per_node(launcher))
    plan = LaunchPlan(site=site, request=request, partition=part, runtime=runtime, image=image,
                      framework=framework.name, launcher=launcher, nodes=request.nodes, gpus_per_node=gpus,
                      tasks_per_node=tasks, cpus_per_task=cpus, time=request.time, command=request.command,
                      env=request.env, mounts=site.mounts + request.mounts,
                      modules=site.modules + request.modules, conda=request.conda or site.conda,
                      venv=request.venv or site.venv, rank_table=request.rank_table or site.rank_table or "v1",
                      code=code if request.code else None,
                      variables=job_variables(site, request, framework.name, launcher))
    check_words(plan)
    framework.check(plan)
    backend.check_plan(plan)
    if request.fetch and backend.srun_words(plan, ()):
        raise ConfigError(f"--fetch runs in the image on this machine, and --runtime {runtime.kind} starts "
                          "containers only in a Slurm job", hint="download in the job itself where the nodes have "
                          "internet, or with the runtime's own tools here (enroot start IMAGE …)")
    refused = list(dict.fromkeys([*scheduler.refusals(plan), *framework.refusals(plan)]))
    if refused:
        raise ConfigError(refused[0] if len(refused) == 1 else
                          f"{len(refused)} options cannot be honoured:\n  " + "\n  ".join(refused),
                          hint="drop them, or do what each message says instead")
    _check_code(request, code, runtime.kind)
    return replace(plan, warnings=enforce(plan))
