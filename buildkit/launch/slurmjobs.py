"""Slurm's answers to job control: the controller first (``scontrol``), then accounting (``sacct``), then
ckit's own record of the job (:mod:`~buildkit.launch.jobrecord`), which is all that is left once Slurm forgot a
job on a cluster without accounting."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from ..errors import LaunchError
from . import jobrecord, slurmctl
from .jobcontrol import CancelResult, JobControl, JobEntry, JobLogs, JobStatus, OnJobEvent


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(seconds))


class SlurmJobControl(JobControl):
    """Job control through Slurm's commands; the scheduler backend ``slurm`` inherits it."""

    def check_job_id(self, job_id: str) -> str:
        return slurmctl.check_job_id(job_id)

    def queue(self, user: str | None, everyone: bool = False) -> list[JobEntry]:
        return slurmctl.jobs(user, everyone)

    def history(self, user: str | None, since: float, records: Path | None = None) -> list[JobEntry]:
        """From accounting where the cluster keeps it; else from ckit's records of the jobs it submitted (the
        jobs others submitted, or ckit did not, are then not listed)."""
        found = slurmctl.history(user, since)
        if found is not None:
            return found
        rows = []
        for record in jobrecord.since(since, records):
            if record.scheduler != self.name or (user and record.user and record.user != user):
                continue
            status = self._status(record.job_id, record, records)
            rows.append(JobEntry(record.job_id, record.name, status.state, user=record.user,
                                 submitted=_iso(record.submitted), exit_code=status.exit_code, source="records"))
        return rows

    def status(self, job_id: str, records: Path | None = None) -> JobStatus:
        self.check_job_id(job_id)
        return self._status(job_id, jobrecord.find(job_id, records), records)

    def _status(self, job_id: str, record: jobrecord.JobRecord | None, records: Path | None) -> JobStatus:
        if record is not None and record.state is not None:  # ckit saw it end: final
            return JobStatus(job_id, record.state, False, record.exit_code, "records")
        fields = slurmctl.job_fields(job_id)
        if fields and (record is None or fields.get("JobName") == record.name):  # not another cluster's job
            state = fields.get("JobState", "UNKNOWN")
            active = state in slurmctl.ACTIVE_STATES
            code = None if active else slurmctl.exit_code(fields.get("ExitCode", ""))
            if not active and record is not None:
                jobrecord.finished(record, state, code, records)
            return JobStatus(job_id, state, active, code, "controller")
        past = slurmctl.past_job_fields(job_id)
        if past:
            state = past["JobState"]
            return JobStatus(job_id, state, state in slurmctl.ACTIVE_STATES, slurmctl.exit_code(past["ExitCode"]),
                             "accounting")
        return JobStatus(job_id, "UNKNOWN", False, None, "unknown")

    def log_files(self, job_id: str, cwd: Path, records: Path | None = None) -> JobLogs:
        """The controller's StdOut/StdErr while it knows the job; then the ``-o``/``-e`` patterns ckit
        recorded at submit time (``%x.o%j`` too); then ckit's default ``NAME-ID.out`` in ``cwd``."""
        fields = slurmctl.job_fields(self.check_job_id(job_id))
        out, err = fields.get("StdOut"), fields.get("StdErr")
        if out:
            return JobLogs(job_id, Path(out), Path(err) if err and err != out else None)
        record = jobrecord.find(job_id, records)
        if record is not None:
            output = slurmctl.log_path(record.output, job_id, record.name, Path(record.cwd))
            error = slurmctl.log_path(record.error, job_id, record.name, Path(record.cwd)) if record.error else None
            if output is not None:
                return JobLogs(job_id, output, error if error != output else None)
        found = slurmctl.log_in(cwd, job_id)
        if found is not None:
            return JobLogs(job_id, found)
        raise LaunchError(f"job {job_id}: no log found (Slurm forgot the job, ckit has no record of it and no "
                          f"*-{job_id}.out or *.o{job_id} is here)",
                          hint="run ckit logs in the folder the job was submitted from")

    def waited_exit_code(self, job_id: str, records: Path | None = None, poll: float = 1.0,
                         logs: Sequence[tuple[str, Path]] = (), on_event: OnJobEvent | None = None) -> int:
        """Wait for the job; its exit code (``ckit launch --wait``). ``on_event`` hears its state changes and
        its ``logs`` as they are written (:meth:`~JobControl.watch`)."""
        status = self.watch(job_id, logs, on_event, records=records, poll=poll)
        if status.exit_code is None:
            raise LaunchError(f"job {job_id}: the controller no longer knows it and accounting has no record",
                              hint="read its log with ckit logs")
        return status.exit_code

    def cancel(self, job_id: str) -> CancelResult:
        """Cancel a job in the queue; a job that already ended is left as it is (``cancelled`` False, its
        state); a job the controller does not know is an error (a typo must not read as done)."""
        state = slurmctl.job_fields(self.check_job_id(job_id)).get("JobState")
        if state is None:
            raise LaunchError(f"job {job_id}: the Slurm controller does not know it, nothing was cancelled",
                              hint="ckit jobs lists your jobs in the queue (ckit jobs --since 1d the past ones)")
        if state not in slurmctl.ACTIVE_STATES:
            return CancelResult(job_id, False, state)
        slurmctl.cancel(job_id)
        return CancelResult(job_id, True, slurmctl.job_fields(job_id).get("JobState"))


def wait_for(job_id: str, poll: float = 1.0) -> int:
    """Block until the job is over; its exit code (128 + N when a signal N ended it)."""
    return SlurmJobControl().waited_exit_code(job_id, poll=poll)
