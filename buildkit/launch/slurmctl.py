"""What users of the seed guides do next with Slurm: list jobs, read a job's log, cancel it, open a shell.

``squeue``/``scontrol``/``scancel``/``salloc`` through the one process runner; results are plain objects
(``--json`` prints them).
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..config import limits
from ..errors import CommandFailed, ConfigError, LaunchError, os_error
from ..fsutil import read_tail
from ..process import require, run, which

_JOB_ID = re.compile(r"[0-9]+(_[0-9]+)?")  # ASCII digits: \d and str.isdigit take every script's
_SQUEUE_FIELDS = "ijTPDMRu"  # squeue's letters for Job's fields, in order
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "STAGE_OUT")


@dataclass(frozen=True)
class Job:
    job_id: str
    name: str
    state: str
    partition: str
    nodes: str
    time: str
    where: str  # the node list, or why it is pending
    user: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def check_job_id(job_id: str) -> str:
    if not _JOB_ID.fullmatch(job_id):
        raise ConfigError(f"{job_id!r} is not a Slurm job id", hint="e.g. 1234 (ckit jobs lists yours)")
    return job_id


def _slurm(argv: list[str], step: str, env: dict[str, str] | None = None) -> str:
    require(argv[0], purpose=step, package="slurm-client")
    try:
        return run(argv, step=step, timeout=60, env=env).stdout
    except CommandFailed as err:
        raise LaunchError(f"{argv[0]} failed: {err.stderr_tail.strip()}",
                          hint="is the Slurm controller reachable (SLURM_CONF)?") from err


def jobs(user: str | None, everyone: bool = False) -> list[Job]:
    """The queue (``squeue``): the user's jobs, or everyone's.

    A job name may hold any byte (Slurm takes ``|``, newlines and escapes from whoever submits), so no
    character can separate the fields. They are separated by a random token instead, new for each call: a
    name was given before the token existed and cannot hold it. The format goes in the environment
    (``SQUEUE_FORMAT``, which squeue reads as ``--format``) rather than on the command line, which other users
    can read while squeue runs."""
    token = f"@ckit{secrets.token_hex(16)}@"
    argv = ["squeue", "--noheader"] + ([] if everyone or not user else ["--user", user])
    out = _slurm(argv, "list the jobs", env={"SQUEUE_FORMAT": "".join(f"{token}%{c}" for c in _SQUEUE_FIELDS)})
    return parse_jobs(out, token)


def parse_jobs(out: str, token: str) -> list[Job]:
    """squeue's records, each field after ``token`` and each record ending in a newline (the last field's)."""
    first, *fields = out.split(token)
    count = len(_SQUEUE_FIELDS)
    if first.strip() or len(fields) % count:
        raise LaunchError("squeue's answer is not the list of jobs ckit asked for",
                          hint="run `squeue` to see what it says (is SLURM_CONF the right cluster's?)")
    found = []
    for at in range(0, len(fields), count):
        job_id, name, state, partition, nodes, elapsed, where, user = fields[at:at + count]
        found.append(Job(job_id, name, state, partition, nodes, elapsed, where, user.removesuffix("\n")))
    return found


def job_fields(job_id: str) -> dict[str, str]:
    """``scontrol show job`` as a dict (empty when the controller no longer knows the job)."""
    require("scontrol", purpose="read the job", package="slurm-client")
    result = run(["scontrol", "show", "job", "--oneliner", check_job_id(job_id)], step="scontrol", check=False,
                 timeout=60)
    if result.returncode != 0:
        return {}
    return dict(field.split("=", 1) for field in result.stdout.split() if "=" in field)


def past_job_fields(job_id: str) -> dict[str, str]:
    """A finished job from accounting (``sacct``), as JobState/ExitCode; empty without accounting."""
    if not which("sacct"):
        return {}
    result = run(["sacct", "-X", "-n", "-P", "-j", check_job_id(job_id), "-o", "State,ExitCode"], step="sacct",
                 check=False, timeout=60)
    line = result.stdout.strip().splitlines()[0] if result.returncode == 0 and result.stdout.strip() else ""
    if "|" not in line:
        return {}
    state, code = line.split("|", 1)
    return {"JobState": state.split()[0], "ExitCode": code}


def log_file(job_id: str, cwd: Path) -> Path:
    """The job's output file: from the controller, else ckit's NAME-JOBID.out in ``cwd``."""
    out = job_fields(job_id).get("StdOut")
    if out:
        return Path(out)
    found = sorted(cwd.glob(f"*-{check_job_id(job_id)}.out"))
    if found:
        return found[0]
    raise LaunchError(f"job {job_id}: no log found (the controller forgot the job and no *-{job_id}.out is here)",
                      hint="run ckit logs in the folder the job was submitted from")


@dataclass(frozen=True)
class LogPiece:
    """Bytes of a job's log, and how many bytes before them were left out (the log was longer than the
    ``log_tail`` limit, or grew by more than it between two looks)."""

    data: bytes
    skipped: int = 0


def read_log(path: Path, job_id: str, start: int = 0) -> tuple[LogPiece, int]:
    """The log from ``start`` on, at most its last ``log_tail`` bytes (a regular file only: a log that is
    ``/dev/zero`` or a FIFO is refused before it is read); the piece and the offset after it. A log not
    written yet is empty."""
    try:
        data, at = read_tail(path, start, limits.size("log_tail"), f"job {job_id}: its log")
    except FileNotFoundError:
        return LogPiece(b""), start
    except OSError as err:
        raise os_error(err, path, "read") from err
    return LogPiece(data, max(0, at - start)), at + len(data)


def follow(path: Path, job_id: str, active: Callable[[], bool], poll: float = 0.5) -> Iterator[LogPiece]:
    """The log's new bytes as they are written, until the job is over and everything was read; each look
    reads at most the ``log_tail`` limit (a job that writes faster is shown in part, with what was skipped)."""
    offset = 0
    while True:
        running = active()
        while True:
            piece, offset = read_log(path, job_id, offset)
            if not piece.data:
                break
            yield piece
        if not running:
            return
        time.sleep(poll)


def is_active(job_id: str) -> bool:
    state = job_fields(job_id).get("JobState", "")
    return state in ACTIVE_STATES


def cancel(job_id: str) -> dict[str, Any]:
    _slurm(["scancel", check_job_id(job_id)], "cancel the job")
    return {"job_id": job_id, "cancelled": True, "state": job_fields(job_id).get("JobState")}
