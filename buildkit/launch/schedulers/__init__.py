"""Schedulers: how a plan becomes a job (an sbatch script, a platform's job form) and is handed over.

One module per scheduler; a site profile names its scheduler. ``render`` is pure; ``execute`` writes files and
talks to the scheduler, and returns a :class:`LaunchResult`. Job control (the queue, a job's state and logs,
cancel, history, a shell) is the scheduler's too: :class:`~buildkit.launch.jobcontrol.JobControl`, whose
methods a scheduler that cannot answer leaves refusing.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from ..backend import Registry
from ..jobcontrol import JobControl, OnJobEvent

if TYPE_CHECKING:
    from ...site.model import Site
    from ..model import Image, LaunchPlan


@dataclass(frozen=True)
class Execution:
    """How to carry a rendered job out (from the command line)."""

    dry_run: bool = False
    submit: bool | None = None  # None: when the scheduler's client is there
    wait: bool = False
    script: Path | None = None  # where the job file goes (dlws: the folder for its files)
    cwd: Path = field(default_factory=Path.cwd)
    records: Path | None = None  # the folder of ckit's job records (default: the user's, jobrecord.py)
    on_event: OnJobEvent | None = None  # with wait: told the job's state changes and its log as it is written


@dataclass
class LaunchResult:
    """What ``ckit launch`` did: ``--json`` prints :meth:`as_json`."""

    site: str
    scheduler: str
    text: str  # the script, or the job form
    warnings: tuple[str, ...] = ()
    script: str | None = None
    files: dict[str, str] = field(default_factory=dict)  # platform path -> local path written
    job_id: str | None = None
    exit_code: int | None = None
    output: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    runs: str | None = None  # how many times the command runs, and where

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"site": self.site, "scheduler": self.scheduler, "warnings": list(self.warnings),
                                "script": self.script, "job_id": self.job_id, "text": self.text, "runs": self.runs}
        if self.exit_code is not None:
            data.update(exit_code=self.exit_code, output=self.output)
        if self.files:
            data["files"] = self.files
        data.update(self.extra)
        return data


class SchedulerBackend(JobControl, abc.ABC):
    name = ""
    summary = ""
    order = 50
    uses_partitions = True
    frameworks: tuple[str, ...] | None = None  # None: all
    preferred_launchers: dict[str, str] = {}
    variable_prefixes: tuple[str, ...] = ()  # the variables the scheduler sets in every task (words.py)
    # request fields this scheduler cannot honour, each with what to do instead (ckit launch refuses them)
    cannot: dict[str, str] = {}
    # what an interactive job or `ckit shell` runs when no command is given (empty: this scheduler opens none)
    shell_program: tuple[str, ...] = ()
    clients_package = ""  # the Debian package of the scheduler's commands, named when one is missing

    def submits(self, plan: LaunchPlan, how: Execution) -> bool:
        """Whether ``how`` queues ``plan``'s job here (not a dry run, not only a written job): what the
        preflight checks guard. A scheduler that hands nothing over never does."""
        return False

    def refusals(self, plan: LaunchPlan) -> list[str]:
        """One message per option the user gave that this scheduler cannot honour."""
        from ..model import FLAGS, given

        return [f"{FLAGS[name]}: {plan.site.name} ({self.name}) cannot honour it; {why}"
                for name, why in self.cannot.items() if given(plan.request, name)]

    def check_framework(self, site: Site, framework: str) -> None:
        if self.frameworks is not None and framework not in self.frameworks:
            raise ConfigError(f"--framework {framework} is not available on {site.name}",
                              hint=f"use {', '.join(self.frameworks)} on a {self.name} site")

    def image(self, site: Site, image: Image | None) -> Image | None:
        return image

    @abc.abstractmethod
    def render(self, plan: LaunchPlan) -> Any:
        """The job in this scheduler's form (an sbatch script, a job form)."""

    @abc.abstractmethod
    def execute(self, plan: LaunchPlan, job: Any, how: Execution) -> LaunchResult:
        """Write, submit and follow ``job`` as ``how`` asks; what happened."""


REGISTRY: Registry[SchedulerBackend] = Registry(__name__, __path__, "scheduler")
LOCAL = "slurm"  # the scheduler of the jobs this machine's clients reach without a site (SLURM_CONF's)


def local() -> SchedulerBackend:
    """The scheduler of a job ckit has no record of, and of submitit's jobs: the one this machine's clients
    (``squeue``, ``sacct``) answer for."""
    return REGISTRY.get(LOCAL, "scheduler")
