"""Write a job script atomically and submit it with sbatch (the only I/O of ckit launch)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import CommandFailed, LaunchError
from ..fsutil import atomic_path


@dataclass(frozen=True)
class Submission:
    job_id: str
    script: Path
    exit_code: int | None = None


def write_script(text: str, path: Path, inputs: Iterable[Path] = ()) -> Path:
    """Write ``text`` to ``path`` (mode 0755) through a temp file in the same folder and a rename; the output
    guard refuses a device, a folder or one of ``inputs`` (e.g. the image file) at ``path``."""
    path = path.resolve()
    data = text.encode("utf-8", "surrogateescape")  # an argument that was not UTF-8 goes back as its bytes

    def same_text(tmp: Path) -> None:
        if tmp.read_bytes() != data:  # bytes: reading text would turn a CR in a value into a newline
            raise LaunchError(f"{path}: written script differs from the rendered one")

    with atomic_path(path, mode=0o755, verify=same_text, inputs=inputs) as tmp:
        tmp.write_bytes(data)
    return path


def submit(script: Path, *, wait: bool = False, cwd: Path | None = None, poll: float = 1.0) -> Submission:
    """``sbatch --parsable SCRIPT``; with ``wait``, then the job's exit code (``ExitCode=N:SIG``).

    ckit polls the controller every ``poll`` seconds instead of ``sbatch --wait``, whose backoff reports a
    15-second job only after 30 s or more."""
    from .slurmctl import slurm_run

    try:
        result = slurm_run(["sbatch", "--parsable", str(script)], "submit the job", cwd=cwd or script.parent)
    except CommandFailed as err:
        raise LaunchError(f"sbatch rejected {script}: {err.stderr_tail.strip()}",
                          hint="check the partition, account and resources with `ckit sites show`") from err
    match = re.search(r"^([0-9]+)", result.stdout.strip())
    if not match:
        raise LaunchError(f"sbatch gave no job id for {script}: {(result.stderr or result.stdout).strip()}")
    job_id = match.group(1)
    return Submission(job_id=job_id, script=script, exit_code=wait_for(job_id, poll) if wait else None)


def wait_for(job_id: str, poll: float = 1.0) -> int:
    """Block until the job is over; its exit code (128 + N when a signal N ended it)."""
    from .slurmjobs import SlurmJobControl

    return SlurmJobControl().waited_exit_code(job_id, poll=poll)
