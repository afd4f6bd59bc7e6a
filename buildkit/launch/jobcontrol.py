"""Job control, as every scheduler offers it: the queue, a job's state, its logs, cancel, history, a shell.

A scheduler backend (``schedulers/``) inherits :class:`JobControl`; each method it cannot answer refuses
with a :class:`~buildkit.errors.ConfigError` that says why and where to look instead (the Apulis platform's
jobs live in its web portal). The result objects here are what ``ckit jobs/logs/cancel --json`` print and
what the Python API returns. Reading a log is the same for every scheduler that writes files, so it is here.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import limits
from ..errors import ConfigError, JobTimeout, os_error
from ..fs.files import read_tail
from ..outside import ascii_int

if TYPE_CHECKING:
    from .model import LaunchPlan

_SINCE = re.compile(r"([0-9]+)([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True)
class JobEntry:
    """One row of ``ckit jobs``: a job in the queue or, with ``--since``, in the history."""

    job_id: str
    name: str
    state: str
    partition: str = ""
    nodes: str = ""
    time: str = ""  # elapsed
    where: str = ""  # the node list, or why it is pending
    user: str = ""
    submitted: str = ""  # ISO time, in the history
    exit_code: int | None = None  # of a finished job, where known
    source: str = "queue"  # queue, accounting (sacct) or records (ckit's own, written at submit time)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class JobStatus:
    """A job's state now. ``active`` while it is queued or running; ``exit_code`` once it is over (128 + N
    when signal N ended it), when someone still knows it. ``source`` says who answered: the controller, the
    accounting, ckit's record of the job, or nobody (``unknown``)."""

    job_id: str
    state: str
    active: bool
    exit_code: int | None = None
    source: str = "controller"

    @property
    def done(self) -> bool:
        return not self.active

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "done": self.done}


@dataclass(frozen=True)
class JobLogs:
    """Where a job's output goes: ``output`` (sbatch's ``-o``) and ``error`` (``-e``, None when it is the
    same file or the scheduler writes none)."""

    job_id: str
    output: Path
    error: Path | None = None


@dataclass(frozen=True)
class LogPiece:
    """Bytes of a job's log, and how many bytes before them were left out (the log was longer than the
    ``log_tail`` limit, or grew by more than it between two looks). ``stream`` is ``output`` or ``error``."""

    data: bytes
    skipped: int = 0
    stream: str = "output"


@dataclass(frozen=True)
class LogText:
    """The end of a job's logs (``ckit logs --json``)."""

    job_id: str
    log: str
    text: str
    skipped_bytes: int
    state: str | None
    error_log: str | None = None
    error_text: str | None = None
    error_skipped_bytes: int | None = None

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.error_log is None:  # the shape ckit logs --json always had, for a job with one log
            for key in ("error_log", "error_text", "error_skipped_bytes"):
                data.pop(key)
        return data


@dataclass(frozen=True)
class JobEvent:
    """News of a job being waited for (:meth:`JobControl.watch`): ``status`` when its state changed (the
    first look too), or ``piece``, new bytes of its log."""

    job_id: str
    status: JobStatus | None = None
    piece: LogPiece | None = None


OnJobEvent = Callable[[JobEvent], None]


@dataclass(frozen=True)
class CancelResult:
    job_id: str
    cancelled: bool
    state: str | None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ShellCommand:
    """The command that opens a shell on a compute node (``ckit shell``), and the text it runs there."""

    site: str
    argv: list[str]
    text: str
    warnings: tuple[str, ...] = field(default=())

    def as_json(self, ran: bool) -> dict[str, Any]:
        return {"site": self.site, "argv": self.argv, "ran": ran}


class JobControl:
    """What a scheduler answers about its jobs. This base refuses everything: a backend overrides what its
    platform can answer and words :attr:`no_control` for the rest."""

    name = ""
    no_control = ""  # why this scheduler's jobs are not reachable from ckit, and where to look instead

    def _cannot(self, what: str) -> ConfigError:
        why = self.no_control or f"the {self.name} scheduler has no command for it"
        return ConfigError(f"cannot {what} on a {self.name} site: {why}",
                           hint="use a Slurm site (ckit sites lists them) for jobs ckit can follow")

    def check_job_id(self, job_id: str) -> str:
        raise self._cannot("follow a job")

    def queue(self, user: str | None, everyone: bool = False) -> list[JobEntry]:
        """The jobs in the queue: the user's, or everyone's."""
        raise self._cannot("list the jobs")

    def history(self, user: str | None, since: float, records: Path | None = None) -> list[JobEntry]:
        """The jobs submitted since ``since`` (seconds since the epoch), finished or not."""
        raise self._cannot("list past jobs")

    def status(self, job_id: str, records: Path | None = None) -> JobStatus:
        raise self._cannot("read a job's state")

    def log_files(self, job_id: str, cwd: Path, records: Path | None = None) -> JobLogs:
        raise self._cannot("find a job's log")

    def cancel(self, job_id: str) -> CancelResult:
        raise self._cannot("cancel a job")

    def shell(self, plan: LaunchPlan) -> ShellCommand:
        raise self._cannot("open a shell on a compute node")

    def wait(self, job_id: str, *, timeout: float | None = None, poll: float = 1.0,
             records: Path | None = None) -> JobStatus:
        """Block until the job is over (its final status), or raise :class:`JobTimeout` after ``timeout``
        seconds (the job keeps running)."""
        return self.watch(job_id, timeout=timeout, poll=poll, records=records)

    def watch(self, job_id: str, logs: Sequence[tuple[str, Path]] = (), on_event: OnJobEvent | None = None, *,
              timeout: float | None = None, poll: float = 1.0, records: Path | None = None) -> JobStatus:
        """Wait for the job as :meth:`wait` does, telling ``on_event`` each change of its state and, once
        written, each new piece of its ``logs`` (``(stream, path)`` pairs) until the job is over and they
        were read to their end; its final status."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen: list[JobStatus] = []

        def active() -> bool:
            status = self.status(job_id, records)
            if on_event is not None and (not seen or seen[-1].state != status.state):
                on_event(JobEvent(job_id, status=status))
            seen.append(status)
            if status.active and deadline is not None and time.monotonic() >= deadline:
                raise JobTimeout(f"job {job_id} is still {status.state} after {timeout:g} s",
                                 hint=f"wait longer, or stop it with `ckit cancel {job_id}`")
            return status.active

        step = poll if deadline is None else min(poll, max(0.05, timeout or 0.0))
        for piece in follow(logs, job_id, active, step):
            if on_event is not None:
                on_event(JobEvent(job_id, piece=piece))
        return seen[-1]


def parse_since(text: str, now: float) -> float:
    """``2d``, ``12h``, ``30m``, ``1w``, ``90s`` before ``now``, or a date ``YYYY-MM-DD[THH:MM[:SS]]`` (local
    time): seconds since the epoch."""
    import datetime as dt

    match = _SINCE.fullmatch(text.strip())
    if match:
        count = ascii_int(match.group(1))
        assert count is not None  # the pattern took ASCII digits only
        return now - count * _UNIT_SECONDS[match.group(2)]
    try:
        if not text.isascii():
            raise ValueError(text)
        return dt.datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ConfigError(f"--since {text!r} is neither a duration nor a date",
                          hint="e.g. --since 2d (also 12h, 30m, 1w) or --since 2024-05-01") from None


def read_log(path: Path, job_id: str, start: int = 0, stream: str = "output") -> tuple[LogPiece, int]:
    """The log from ``start`` on, at most its last ``log_tail`` bytes (a regular file only: a log that is
    ``/dev/zero`` or a FIFO is refused before it is read); the piece and the offset after it. A log not
    written yet is empty."""
    try:
        data, at = read_tail(path, start, limits.size("log_tail"), f"job {job_id}: its log")
    except FileNotFoundError:
        return LogPiece(b"", stream=stream), start
    except OSError as err:
        raise os_error(err, path, "read") from err
    return LogPiece(data, max(0, at - start), stream), at + len(data)


def follow(paths: Sequence[tuple[str, Path]], job_id: str, active: Callable[[], bool],
           poll: float = 0.5) -> Iterator[LogPiece]:
    """The logs' new bytes as they are written (each ``(stream, path)`` in turn), until the job is over and
    everything was read; each look reads at most the ``log_tail`` limit of each (a job that writes faster
    is shown in part, with what was skipped)."""
    offsets = {stream: 0 for stream, _ in paths}
    while True:
        running = active()
        for stream, path in paths:
            while True:
                piece, offsets[stream] = read_log(path, job_id, offsets[stream], stream)
                if not piece.data:
                    break
                yield piece
        if not running:
            return
        time.sleep(poll)
