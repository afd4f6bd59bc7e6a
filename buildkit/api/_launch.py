"""Jobs from Python: plan a launch against a site's rules, render its script, submit it, open a shell (what
``ckit launch`` and ``ckit shell`` do). A :class:`~buildkit.launch.plan.LaunchRequest` holds the options, one
field per flag of ``ckit launch`` (``nodes`` is ``-N``, ``env`` the ``--env K=V`` pairs)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CkitError, ConfigError
from ..launch.model import env_pairs as env_pairs
from ..launch.plan import ImageFacts, LaunchPlan, LaunchRequest
from ..launch.schedulers import Execution, LaunchResult, SchedulerBackend
from ._common import Folders, required_site

if TYPE_CHECKING:
    from ..config.user import UserConfig
    from ..launch.jobcontrol import ShellCommand
    from ..launch.nccl_report import NcclReport
    from ..site.model import Site
    from ._jobs import Job


def image_facts(value: str | None) -> ImageFacts:
    """The squashfs compression of a .sif/.sqsh that exists on this machine (the site's kernel must mount it)."""
    path = Path(value).expanduser() if value else None
    if path is None or not path.is_file():
        return ImageFacts()
    from ..image import inspect as reader

    try:
        offset = reader.squashfs_offset(path)
        if offset is None:
            return ImageFacts()
        return ImageFacts(compression=reader.superblock(path, offset)["compression"])
    except (CkitError, OSError):
        return ImageFacts()  # not a squashfs image ckit can read: the runtime judges it


def local_image(value: str | None) -> str | None:
    """``image`` as the job names it: a relative file path becomes the absolute path of that file here, since
    the tasks may start in another folder and Pyxis takes ``images/x.sqsh`` for a registry image (a file is only
    what starts with / or .). A relative path that names no file is refused: it can only be a typo."""
    import os

    from ..launch.plan import names_a_file

    if value is None or not names_a_file(value) or value.startswith(("/", "~")):
        return value
    path = Path(os.path.abspath(value))
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise ConfigError(f"--image {value}: {path} {what}",
                          hint=f"give the path of an image file (ls {path.parent}), a registry reference such as "
                               "nvcr.io/nvidia/pytorch:24.06-py3, or a stack staged with ckit stage")
    return str(path)


def scheduler_of(plan: LaunchPlan) -> SchedulerBackend:
    from ..launch import schedulers

    return schedulers.REGISTRY.get(plan.site.scheduler, "site scheduler")


def with_defaults(site: str | Site | None, request: LaunchRequest, defaults: UserConfig | None
                  ) -> tuple[str | Site, LaunchRequest]:
    """The site, and ``request`` with the account, partition and time it leaves unset taken from ``defaults``
    (default: the user's config file and the environment, as sbatch takes SBATCH_ACCOUNT: README,
    Configuration)."""
    if defaults is None:
        from ..config.user import load

        defaults = load()
    site = site if site is not None else defaults.site
    if site is None:
        raise ConfigError("no site: give --site SITE, or set a default (site in the config file, or CKIT_SITE)",
                          hint="`ckit sites` lists the sites; `ckit config show` shows the config file")
    taken = {name: getattr(defaults, name) for name in ("account", "partition", "time")
             if getattr(request, name) is None and getattr(defaults, name) is not None}
    for name, value in taken.items():  # a bad default names where it came from, not a flag that was not typed
        _check_default(name, value, defaults.get(name).source)
    return site, replace(request, **taken)


def _check_default(name: str, value: str, source: str) -> None:
    from ..launch.shell import check_sbatch_value, time_minutes

    where = f"{source} (the default of --{name})"
    fix = f"; fix it or unset it ({source}), or give --{name}"
    try:
        time_minutes(value, where) if name == "time" else check_sbatch_value(where, value)
    except ConfigError as err:
        raise ConfigError(err.message, hint=(err.hint or "").replace(where, f"--{name}") + fix) from None


def plan_launch(site: str | Site | None, request: LaunchRequest, *, sites: Folders = (),
                defaults: UserConfig | None = None) -> LaunchPlan:
    """Resolve the site's defaults and check ``request`` against its rules; nothing is written. A relative
    image path is taken from the current folder (refused when it names no file).

    :param site: a site name (``ckit sites``) or a loaded profile; None: the default site of ``defaults``.
    :param request: the job: command, image, framework, resources (one field per ``ckit launch`` flag); an
        account, partition or time it leaves unset is the default of ``defaults``. Its ``code`` folder
        (``--code``) is read now: the plan holds its digest, and :func:`execute` writes the job's copy.
    :param sites: user site folders over the built-ins (``--sites``).
    :param defaults: the user's defaults (:func:`buildkit.config.user.load`: flag > environment > config file);
        None reads them from the environment and the config file.
    :returns: the plan; its ``warnings`` are what ``ckit launch`` prints as warnings.
    :raises ConfigError: a bad request; :class:`~buildkit.errors.PolicyError` a site rule it breaks (exit 2).
    """
    return _plan(*_resolved(site, request, sites, defaults))


def _resolved(site: str | Site | None, request: LaunchRequest, sites: Folders, defaults: UserConfig | None
              ) -> tuple[Site, LaunchRequest]:
    """The site's profile and the request with the user's defaults."""
    from ..config.user import load

    defaults = defaults if defaults is not None else load()
    named, (site, request) = site, with_defaults(site, request, defaults)
    request = replace(request, image=local_image(request.image))
    try:
        return required_site(site, sites), request
    except ConfigError as err:
        if named is not None:
            raise
        source = defaults.get("site").source  # CKIT_SITE or the config file's line: the user did not type it
        raise ConfigError(f"{err.message} (the default site, from {source})",
                          hint=(err.hint or "") + f"; fix {source} or give --site") from None


def _plan(profile: Site, request: LaunchRequest) -> LaunchPlan:
    from ..launch.plan import plan_launch as plan
    from ..launch.plan import runtime_kind
    from ._code import code_tree

    code = code_tree(request.code, runtime_kind(profile, request) == "none") if request.code else None
    return plan(profile, request, image_facts(request.image), code)


def render(plan: LaunchPlan) -> Any:
    """The job in its scheduler's form: the sbatch script (``str``) of a Slurm site, the job form
    (:class:`~buildkit.launch.schedulers.dlws.DlwsJob`) of an Apulis site. Pure: same plan, same bytes."""
    return scheduler_of(plan).render(plan)


def execute(plan: LaunchPlan, how: Execution | None = None, *, preflight: bool = True) -> LaunchResult:
    """Write the rendered job and hand it over as ``how`` says (``ckit launch``'s ``--dry-run``,
    ``--submit/--no-submit``, ``--wait``, ``--script``); what happened (``ckit launch --json``).

    :param preflight: before a job is submitted, check here what the queue would only find out when it starts
        (the conda environment, the modules, a relative program path, the image file, the task count;
        ``--no-preflight`` skips them).
    :raises ConfigError: a preflight check failed (exit 2), each failure named with its fix.
    """
    how = how or Execution()
    scheduler = scheduler_of(plan)
    if preflight and scheduler.submits(plan, how):
        from ..cluster import preflight as checks

        checks.check(plan, how.cwd)
    return scheduler.execute(plan, scheduler.render(plan), how)


def launch(site: str | Site | None, request: LaunchRequest, how: Execution | None = None, *,
           sites: Folders = (), defaults: UserConfig | None = None, preflight: bool = True) -> LaunchResult:
    """Plan, render and execute (``ckit launch``): :func:`plan_launch` then :func:`execute`."""
    return execute(plan_launch(site, request, sites=sites, defaults=defaults), how, preflight=preflight)


def submit(plan: LaunchPlan, *, script: str | Path | None = None, cwd: str | Path | None = None,
           records: str | Path | None = None) -> Job:
    """Submit the planned job (``ckit launch --submit``) and return its handle, without waiting.

    :param script: where the job script goes (default ``NAME.sbatch`` in ``cwd``).
    :param cwd: the submit folder (default: the current folder).
    :param records: the folder of ckit's job records (default: the user's).
    :raises ConfigError: the site's scheduler submits nothing (an Apulis site: its job form is pasted).
    """
    from ._jobs import Job

    scheduler = scheduler_of(plan)
    if scheduler.no_control:
        raise ConfigError(f"{plan.site.name} submits nothing: {scheduler.no_control}",
                          hint="write the job with ckit.execute() and follow the platform's own steps")
    how = Execution(submit=True, script=Path(script) if script else None, cwd=Path(cwd) if cwd else Path.cwd(),
                    records=Path(records) if records else None)
    result = execute(plan, how)
    if result.job_id is None:
        raise ConfigError(f"{plan.site.name}: the job was written to {result.script}, not submitted",
                          hint="is sbatch on PATH?")
    return Job(result.job_id, site=plan.site, records=how.records)


def shell_command(site: str | Site | None, request: LaunchRequest, *, sites: Folders = (),
                  defaults: UserConfig | None = None) -> ShellCommand:
    """The command that opens a shell in the container on a compute node (``ckit shell --dry-run``): one
    task with a terminal (``salloc`` + ``srun --pty`` on Slurm). ``request.command`` defaults to a shell."""
    return scheduler_of(plan := _shell_plan(site, request, sites, defaults)).shell(plan)


def _shell_plan(site: str | Site | None, request: LaunchRequest, sites: Folders, defaults: UserConfig | None
                ) -> LaunchPlan:
    from ..launch import schedulers

    profile, request = _resolved(site, request, sites, defaults)
    program = schedulers.REGISTRY.get(profile.scheduler, f"site {profile.name} scheduler").shell_program
    request = replace(request, command=request.command or program, tasks_per_node=request.tasks_per_node or 1,
                      name=request.name if request.name != "ckit" else "ckit-shell")
    return _plan(profile, request)


def shell(site: str | Site | None, request: LaunchRequest, *, sites: Folders = (),
          defaults: UserConfig | None = None) -> int:
    """Open the shell of :func:`shell_command` on this terminal; its exit code (``ckit shell``)."""
    from ..launch.code import default_index, pack
    from ..process import interactive, require

    plan = _shell_plan(site, request, sites, defaults)
    scheduler = scheduler_of(plan)
    command = scheduler.shell(plan)
    require(command.argv[0], purpose="open an interactive allocation", package=scheduler.clients_package or None)
    if plan.code is not None:  # the job's copy of the --code folder, which the shell's step binds
        pack(plan.code, Path.cwd(), default_index())
    return interactive(command.argv)


def backends() -> dict[str, list[dict[str, Any]]]:
    """The runtimes, frameworks and schedulers ``launch`` knows, one module each (``ckit backends --json``)."""
    from ..launch import frameworks, runtimes, schedulers

    return {
        "runtimes": [{"name": b.name, "summary": b.summary, "files": list(b.files), "references": b.refs}
                     for b in runtimes.REGISTRY.all()],
        "frameworks": [{"name": b.name, "summary": b.summary, "launchers": list(b.launchers)}
                       for b in frameworks.REGISTRY.all()],
        "schedulers": [{"name": b.name, "summary": b.summary} for b in schedulers.REGISTRY.all()],
    }


@dataclass(frozen=True)
class NcclCheck:
    """Each nccl-tests run in a file, and the runs below the expected bus bandwidth (``ckit nccl-report``)."""

    runs: list[NcclReport]
    expect_gbps: float | None  # --expect; None: each run's own (from the site), or none
    below: list[int]  # the runs (from 1) whose average bus bandwidth is below what was expected of them
    expected: list[float | None] = field(default_factory=list)  # per run: what it was held to

    def as_json(self) -> dict[str, Any]:
        return {"runs": [r.as_json() for r in self.runs], "expect_gbps": self.expect_gbps, "below": self.below,
                "expected_gbps": self.expected}


# a run within 10 % of the site's own figure is as good as the site's: the guide's 233 GB/s was 232.8 one way
SITE_SHARE = 0.9


def nccl_report(file: str | Path, *, expect: float | None = None, site: str | Site | None = None,
                sites: Folders = ()) -> NcclCheck:
    """The bus-bandwidth report of each ``all_reduce_perf`` run in ``file`` (the job's log). ``expect`` holds
    every run to that average bus bandwidth; without it, ``site`` holds each run to 90 % of what the site's
    profile says it measured on that many nodes (``nccl_busbw``)."""
    from ..launch import nccl_report as reports

    path = Path(file)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from err
    runs = reports.parse_runs(text, str(path))
    profile = required_site(site, sites) if site is not None and expect is None else None
    expected = [expect if profile is None else _site_share(profile, len(r.hosts)) for r in runs]
    low = [i for i, (r, want) in enumerate(zip(runs, expected, strict=True), 1) if want is not None and r.avg_busbw < want]
    return NcclCheck(runs, expect, low, expected)


def _site_share(site: Site, nodes: int) -> float | None:
    figure = site.expected_busbw(max(nodes, 1))
    return None if figure is None else round(figure * SITE_SHARE, 2)
