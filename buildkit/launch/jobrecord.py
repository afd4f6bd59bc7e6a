"""ckit's own record of each job it submitted: where its logs go and, once ckit saw it end, how it ended.

Slurm forgets a finished job after ``MinJobAge`` (300 s by default) and, without accounting
(``AccountingStorageType=accounting_storage/none``), nothing answers for it afterwards: ``ckit logs`` then finds
the ``-o``/``-e`` files from the record, and ``ckit jobs --since`` lists the jobs from the records. One small JSON
file per job in the user's own folder (``CKIT_CACHE_DIR``/jobs, else the user cache), written atomically at
submit time; nobody else writes there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import CkitError
from ..fs.files import atomic_write, glob_escape, read_capped
from .code import CodeTree

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_RECORD = 64 * 1024  # bytes: a record is a few hundred


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    site: str
    scheduler: str
    name: str
    cwd: str  # the submit folder: sbatch's relative log paths start there
    output: str  # sbatch's -o pattern (%j, %x, …)
    error: str | None = None  # sbatch's -e pattern, if any
    script: str | None = None
    user: str = ""
    submitted: float = 0.0  # seconds since the epoch
    state: str | None = None  # the final state, once ckit saw the job end
    exit_code: int | None = None
    code: str | None = None  # the digest of the code --code shipped with the job
    code_source: str | None = None  # the folder it was copied from

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def default_folder() -> Path:
    from ..storage.store import default_root

    return default_root() / "jobs"


def _file(folder: Path, job_id: str, site: str) -> Path:
    return folder / f"{job_id}@{_UNSAFE.sub('_', site)}.json"


def save(record: JobRecord, folder: Path | None = None) -> Path:
    """Write ``record`` (replacing the one of the same job and site)."""
    folder = folder or default_folder()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = _file(folder, record.job_id, record.site)
    atomic_write(path, json.dumps(record.as_json(), sort_keys=True).encode(), mode=0o600)
    return path


def keep(record: JobRecord, folder: Path | None = None) -> str | None:
    """:func:`save` for a job already submitted, which a failed write must not fail: a warning, or None."""
    try:
        save(record, folder)
    except (OSError, CkitError) as err:
        return f"job {record.job_id} was submitted, but ckit could not keep its record ({err}): once Slurm " \
               "forgets the job, ckit logs finds its log only in the submit folder"
    return None


def _load(path: Path) -> JobRecord | None:
    """The record in ``path``; None for a file that is not one (left by another version, or damaged)."""
    try:
        data = json.loads(read_capped(path, MAX_RECORD, "a job record"))
        return JobRecord(**{k: v for k, v in data.items() if k in JobRecord.__dataclass_fields__})
    except (OSError, ValueError, TypeError, CkitError):
        return None


def find(job_id: str, folder: Path | None = None, site: str | None = None) -> JobRecord | None:
    """The record of ``job_id`` (of ``site``, or the newest of any site: ids repeat across clusters)."""
    folder = folder or default_folder()
    pattern = _file(folder, job_id, site).name if site else f"{glob_escape(job_id)}@*.json"
    found = [r for r in (_load(p) for p in folder.glob(pattern)) if r is not None and r.job_id == job_id]
    return max(found, key=lambda r: r.submitted, default=None)


def since(start: float, folder: Path | None = None, site: str | None = None) -> list[JobRecord]:
    """The records of jobs submitted at or after ``start``, oldest first."""
    folder = folder or default_folder()
    try:
        names = [e.name for e in os.scandir(folder) if e.name.endswith(".json")]
    except FileNotFoundError:
        return []
    found = [r for r in (_load(folder / n) for n in names) if r is not None and r.submitted >= start
             and (site is None or r.site == site)]
    return sorted(found, key=lambda r: (r.submitted, r.job_id))


def finished(record: JobRecord, state: str, exit_code: int | None, folder: Path | None = None) -> None:
    """Keep how the job ended (Slurm will forget it); an unwritable folder only loses the note."""
    if record.state == state and record.exit_code == exit_code:
        return
    with contextlib.suppress(OSError, CkitError):
        save(replace(record, state=state, exit_code=exit_code), folder)


def new(job_id: str, site: str, scheduler: str, name: str, cwd: Path, output: str, error: str | None,
        script: Path | None, code: CodeTree | None = None) -> JobRecord:
    return JobRecord(job_id=job_id, site=site, scheduler=scheduler, name=name, cwd=str(cwd), output=output,
                     error=error, script=str(script) if script else None, user=os.environ.get("USER", ""),
                     submitted=time.time(), code=code.digest if code else None,
                     code_source=code.source if code else None)
