"""Slurm's own commands for job control: ``squeue``, ``scontrol``, ``sacct`` and ``scancel``, through the one
process runner, their answers read into :mod:`~buildkit.launch.jobcontrol`'s objects."""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

from ..config import limits
from ..errors import CommandFailed, CommandTimeout, ConfigError, LaunchError
from ..outside import ascii_int, shown
from ..process import Result, require, run, which
from .jobcontrol import JobEntry

_JOB_ID = re.compile(r"[0-9]+(_[0-9]+)?")  # ASCII digits: \d and str.isdigit take every script's
_SQUEUE_FIELDS = "ijTPDMRu"  # squeue's letters for JobEntry's fields, in order
_SACCT_FIELDS = ("JobID", "JobName", "State", "Partition", "NNodes", "Elapsed", "NodeList", "User", "Submit",
                 "ExitCode")  # JobID first and ExitCode last: a record's joint with the next is "N:S\nID"
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "STAGE_OUT")


def check_job_id(job_id: str) -> str:
    if not _JOB_ID.fullmatch(job_id):
        raise ConfigError(f"{job_id!r} is not a Slurm job id", hint="e.g. 1234 (ckit jobs lists yours)")
    return job_id


def slurm_run(argv: list[str], step: str, *, check: bool = True, env: dict[str, str] | None = None,
              cwd: Path | None = None, unset: tuple[str, ...] = ()) -> Result:
    """A Slurm client command, bounded by ``CKIT_SLURM_TIMEOUT``: Slurm's clients retry an unreadable
    ``SLURM_CONF`` or an unreachable controller for a minute or more without a word, so a command that does not
    answer in time is stopped and named, with what to check."""
    require(argv[0], purpose=step, package="slurm-client")
    conf = os.environ.get("SLURM_CONF")
    if conf and not Path(conf).is_file():  # squeue would retry reading it for 60 s
        raise ConfigError(f"SLURM_CONF={shown(conf)} names no file, so {argv[0]} cannot {step}",
                          hint="unset SLURM_CONF or point it at the cluster's slurm.conf")
    timeout = limits.get("slurm_timeout")
    try:
        return run(argv, step=step, timeout=timeout, env=env, check=check, cwd=cwd, unset=unset)
    except CommandTimeout as err:
        where = f"SLURM_CONF={shown(conf)}" if conf else "the default slurm.conf (SLURM_CONF is not set)"
        raise LaunchError(f"{argv[0]} did not answer within {timeout:g} s ({step}): the Slurm controller named "
                          f"by {where} is not reachable", hint="check SLURM_CONF and that slurmctld runs "
                          "(`scontrol ping`); CKIT_SLURM_TIMEOUT sets how long ckit waits") from err


def _slurm(argv: list[str], step: str, env: dict[str, str] | None = None) -> str:
    try:
        return slurm_run(argv, step, env=env).stdout
    except CommandFailed as err:
        raise LaunchError(f"{argv[0]} failed: {err.stderr_tail.strip()}",
                          hint="is the Slurm controller reachable (SLURM_CONF)?") from err


def jobs(user: str | None, everyone: bool = False) -> list[JobEntry]:
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


def parse_jobs(out: str, token: str) -> list[JobEntry]:
    """squeue's records, each field after ``token`` and each record ending in a newline (the last field's)."""
    first, *fields = out.split(token)
    count = len(_SQUEUE_FIELDS)
    if first.strip() or len(fields) % count:
        raise LaunchError("squeue's answer is not the list of jobs ckit asked for",
                          hint="run `squeue` to see what it says (is SLURM_CONF the right cluster's?)")
    found = []
    for at in range(0, len(fields), count):
        job_id, name, state, partition, nodes, elapsed, where, user = fields[at:at + count]
        found.append(JobEntry(job_id, name, state, partition, nodes, elapsed, where, user.removesuffix("\n")))
    return found


def exit_code(text: str) -> int | None:
    """Slurm's ``ExitCode=N:S`` as one number: N, or 128 + S when signal S ended the job."""
    code, _, signal = text.strip().partition(":")
    number, sig = ascii_int(code), ascii_int(signal or "0")
    if number is None or sig is None:
        return None
    return number if number or not sig else 128 + sig


def job_fields(job_id: str) -> dict[str, str]:
    """``scontrol show job`` as a dict (empty when the controller no longer knows the job)."""
    result = slurm_run(["scontrol", "show", "job", "--oneliner", check_job_id(job_id)], "read the job", check=False)
    if result.returncode != 0:
        return {}
    return dict(field.split("=", 1) for field in result.stdout.split() if "=" in field)


def past_job_fields(job_id: str) -> dict[str, str]:
    """A finished job from accounting (``sacct``), as JobState/ExitCode; empty without accounting."""
    if not which("sacct"):
        return {}
    result = slurm_run(["sacct", "-X", "-n", "-P", "-j", check_job_id(job_id), "-o", "State,ExitCode"],
                       "read the job's accounting", check=False)
    line = result.stdout.strip().splitlines()[0] if result.returncode == 0 and result.stdout.strip() else ""
    if "|" not in line:
        return {}
    state, code = line.split("|", 1)
    return {"JobState": state.split()[0], "ExitCode": code}


def history(user: str | None, since: float) -> list[JobEntry] | None:
    """The jobs submitted since ``since`` from accounting (``sacct``); None where there is no accounting to
    ask (no ``sacct``, or ``accounting_storage/none``, where sacct answers with an error)."""
    if not which("sacct"):
        return None
    token = f"@ckit{secrets.token_hex(16)}@"
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since))
    argv = ["sacct", "-X", "-n", "--parsable2", f"--delimiter={token}", "-S", start, "-E", "now",
            "-o", ",".join(_SACCT_FIELDS)] + (["-u", user] if user else ["--allusers"])
    result = slurm_run(argv, "list past jobs", check=False)
    if result.returncode != 0:
        return None
    return parse_history(result.stdout, token)


def parse_history(out: str, token: str) -> list[JobEntry]:
    """sacct's records: fields separated by ``token``, records by a newline, which a job name may hold too; a
    record's last field (ExitCode) and the next one's first (JobID) hold none, so their joint is read at its
    last newline."""
    if not out.strip():
        return []
    pieces = out.rstrip("\n").split(token)
    per = len(_SACCT_FIELDS) - 1
    if (len(pieces) - 1) % per:
        raise LaunchError("sacct's answer is not the list of jobs ckit asked for", hint="run `sacct` to see it")
    records, current = [], [pieces[0]]
    for piece in pieces[1:-1]:
        if len(current) == per:  # ExitCode of this record, JobID of the next
            code, _, next_id = piece.rpartition("\n")
            records.append([*current, code])
            current = [next_id]
        else:
            current.append(piece)
    records.append([*current, pieces[-1]])
    return [JobEntry(job_id=r[0], name=r[1], state=r[2].split()[0] if r[2] else "", partition=r[3], nodes=r[4],
                     time=r[5], where=r[6], user=r[7], submitted=r[8], exit_code=exit_code(r[9]),
                     source="accounting") for r in records]


def cancel(job_id: str) -> None:
    """``scancel JOB``; an error when scancel says one (some versions print it and still exit 0)."""
    result = slurm_run(["scancel", check_job_id(job_id)], "cancel the job", check=False)
    said = (result.stderr or result.stdout).strip()
    if result.returncode != 0 or "error" in said.lower():
        raise LaunchError(f"scancel could not cancel job {job_id}: {said or f'exit code {result.returncode}'}",
                          hint="ckit jobs lists your jobs in the queue")


def log_in(cwd: Path, job_id: str) -> Path | None:
    """A log of this job that ckit's defaults or sbatch's usual patterns name (``NAME-ID.out``, ``NAME.oID``,
    ``slurm-ID.out``) in ``cwd``."""
    for pattern in (f"*-{check_job_id(job_id)}.out", f"*.o{job_id}"):
        found = sorted(cwd.glob(pattern))
        if found:
            return found[0]
    return None


def log_path(pattern: str, job_id: str, name: str, cwd: Path) -> Path | None:
    """The job's log file of sbatch's ``--output`` pattern (%j, %x, %u, %%); None for per-node patterns."""
    if re.search(r"%(?![jxu%])", pattern):
        return None
    user = os.environ.get("USER", "")
    text = re.sub(r"%([jxu%])", lambda m: {"j": job_id, "x": name, "u": user, "%": "%"}[m.group(1)], pattern)
    return cwd / text
