"""Following jobs from Python: the queue and history, a job's state, logs and exit code, cancel; and
:class:`Job`, one job's handle. Every call asks the site's scheduler (``ckit jobs``, ``logs``, ``cancel``):
Slurm answers, an Apulis site refuses with the reason."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..launch import jobrecord, schedulers
from ..launch.jobcontrol import CancelResult, JobEntry, JobLogs, JobStatus, LogPiece, LogText
from ._common import Folders, site_profile

if TYPE_CHECKING:
    from ..launch.schedulers import SchedulerBackend
    from ..site.model import Site


def _path(value: str | Path | None) -> Path | None:
    return Path(value) if value is not None else None


def scheduler_for(site: str | Site | None = None, job_id: str | None = None, *, sites: Folders = (),
                  records: str | Path | None = None) -> SchedulerBackend:
    """The scheduler of ``site``; without one, the scheduler ckit recorded for ``job_id`` when it submitted
    it; else the scheduler this machine's clients reach (:func:`~buildkit.launch.schedulers.local`)."""
    profile = site_profile(site, sites)
    if profile is not None:
        return schedulers.REGISTRY.get(profile.scheduler, f"site {profile.name} scheduler")
    record = jobrecord.find(job_id, _path(records)) if job_id else None
    return schedulers.REGISTRY.get(record.scheduler, "scheduler") if record else schedulers.local()


def jobs(*, site: str | Site | None = None, everyone: bool = False, since: str | float | None = None,
         sites: Folders = (), records: str | Path | None = None) -> list[JobEntry]:
    """Your jobs in the queue (``ckit jobs``), everyone's with ``everyone``; with ``since``, the jobs
    submitted since then, finished ones too (``ckit jobs --since 2d``: from accounting where the cluster keeps
    it, else from ckit's records of the jobs it submitted).

    :param since: ``2d``, ``12h``, ``30m``, ``1w``, a date ``YYYY-MM-DD``, or seconds since the epoch.
    """
    from ..launch.jobcontrol import parse_since

    scheduler = scheduler_for(site, sites=sites, records=records)
    user = os.environ.get("USER") or None
    if since is None:
        return scheduler.queue(user, everyone)
    start = since if isinstance(since, (int, float)) else parse_since(since, time.time())
    return scheduler.history(None if everyone else user, start, _path(records))


def logs(job_id: str, *, site: str | Site | None = None, cwd: str | Path | None = None, sites: Folders = (),
         records: str | Path | None = None) -> LogText:
    """The end of a job's output (its ``-o`` file) and of its ``-e`` file when it has one (``ckit logs``), at
    most ``CKIT_MAX_LOG_TAIL`` bytes of each; found from the controller, else from ckit's record of the job
    (after Slurm forgot it), else as ``NAME-ID.out`` in ``cwd``."""
    from ..launch.jobcontrol import read_log

    scheduler = scheduler_for(site, job_id, sites=sites, records=records)
    files = scheduler.log_files(scheduler.check_job_id(job_id), Path(cwd or Path.cwd()), _path(records))
    out, _ = read_log(files.output, job_id)
    state = scheduler.status(job_id, _path(records)).state
    if files.error is None:
        return LogText(job_id, str(files.output), out.data.decode("utf-8", "replace"), out.skipped, state)
    err, _ = read_log(files.error, job_id, stream="error")
    return LogText(job_id, str(files.output), out.data.decode("utf-8", "replace"), out.skipped, state,
                   str(files.error), err.data.decode("utf-8", "replace"), err.skipped)


def log_files(job_id: str, *, site: str | Site | None = None, cwd: str | Path | None = None, sites: Folders = (),
              records: str | Path | None = None) -> JobLogs:
    """Where a job's ``-o`` and ``-e`` files are."""
    scheduler = scheduler_for(site, job_id, sites=sites, records=records)
    return scheduler.log_files(scheduler.check_job_id(job_id), Path(cwd or Path.cwd()), _path(records))


def follow(job_id: str, *, site: str | Site | None = None, cwd: str | Path | None = None, sites: Folders = (),
           records: str | Path | None = None, poll: float = 0.5) -> Iterator[LogPiece]:
    """A job's output as it is written, until the job is over (``ckit logs -f``); pieces of the ``-e`` file
    have ``stream == "error"``."""
    from ..launch import jobcontrol

    scheduler = scheduler_for(site, job_id, sites=sites, records=records)
    files = log_files(job_id, site=site, cwd=cwd, sites=sites, records=records)
    paths = [("output", files.output)] + ([("error", files.error)] if files.error else [])
    return jobcontrol.follow(paths, job_id, lambda: scheduler.status(job_id, _path(records)).active, poll)


def cancel(job_id: str, *, site: str | Site | None = None, sites: Folders = (),
           records: str | Path | None = None) -> CancelResult:
    """Cancel a job (``ckit cancel``)."""
    scheduler = scheduler_for(site, job_id, sites=sites, records=records)
    return scheduler.cancel(scheduler.check_job_id(job_id))


class Job:
    """One job's handle: its state, a wait with a timeout, its output and exit code, cancel.

    :param job_id: the scheduler's id (:attr:`LaunchResult.job_id`, or one ``ckit jobs`` lists).
    :param site: the site it runs on (default: the one ckit recorded when it submitted the job, else Slurm).
    """

    def __init__(self, job_id: str, *, site: str | Site | None = None, sites: Folders = (),
                 records: str | Path | None = None, cwd: str | Path | None = None) -> None:
        self.scheduler = scheduler_for(site, job_id, sites=sites, records=records)
        self.job_id = self.scheduler.check_job_id(job_id)
        self._records, self._cwd = _path(records), Path(cwd or Path.cwd())

    def status(self) -> JobStatus:
        """The state now, and the exit code once the job is over."""
        return self.scheduler.status(self.job_id, self._records)

    @property
    def state(self) -> str:
        """``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``, ``CANCELLED``, ``TIMEOUT``… as Slurm says."""
        return self.status().state

    def done(self) -> bool:
        return self.status().done

    @property
    def exit_code(self) -> int | None:
        """The exit code of a finished job (128 + N when signal N ended it); None while it runs."""
        return self.status().exit_code

    def wait(self, timeout: float | None = None, poll: float = 1.0) -> JobStatus:
        """Block until the job is over; its final status. After ``timeout`` seconds raise
        :class:`~buildkit.errors.JobTimeout` (the job goes on)."""
        return self.scheduler.wait(self.job_id, timeout=timeout, poll=poll, records=self._records)

    def logs(self) -> JobLogs:
        """Where its ``-o`` and ``-e`` files are."""
        return self.scheduler.log_files(self.job_id, self._cwd, self._records)

    def stdout(self) -> str:
        """The end of its output (``-o``): at most ``CKIT_MAX_LOG_TAIL`` bytes; empty before it starts."""
        from ..launch.jobcontrol import read_log

        return read_log(self.logs().output, self.job_id)[0].data.decode("utf-8", "replace")

    def stderr(self) -> str | None:
        """The end of its ``-e`` file; None when stderr goes to the output."""
        from ..launch.jobcontrol import read_log

        error = self.logs().error
        return None if error is None else read_log(error, self.job_id)[0].data.decode("utf-8", "replace")

    def cancel(self) -> CancelResult:
        return self.scheduler.cancel(self.job_id)

    def __repr__(self) -> str:
        return f"Job({self.job_id!r}, scheduler={self.scheduler.name!r})"
