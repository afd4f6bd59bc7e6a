"""Write a job script atomically and submit it with sbatch (the only I/O of ckit launch)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import CommandFailed, LaunchError
from ..fs.files import atomic_path


@dataclass(frozen=True)
class Submission:
    job_id: str
    script: Path


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


# sbatch lets these override the script's #SBATCH lines; ckit has already chosen between them and the flags
# (a flag wins, as with sbatch itself) and written the choice into the script
DECIDED = ("SBATCH_ACCOUNT", "SBATCH_PARTITION", "SBATCH_TIMELIMIT")


def submit(script: Path, *, cwd: Path | None = None) -> Submission:
    """``sbatch --parsable SCRIPT``: the job id (the scheduler's job control follows the job from there)."""
    from .slurmctl import slurm_run

    try:
        result = slurm_run(["sbatch", "--parsable", str(script)], "submit the job", cwd=cwd or script.parent,
                           unset=DECIDED)
    except CommandFailed as err:
        raise LaunchError(f"sbatch rejected {script}: {err.stderr_tail.strip()}",
                          hint="check the partition, account and resources with `ckit sites show`") from err
    match = re.search(r"^([0-9]+)", result.stdout.strip())
    if not match:
        raise LaunchError(f"sbatch gave no job id for {script}: {(result.stderr or result.stdout).strip()}")
    job_id = match.group(1)
    return Submission(job_id=job_id, script=script)
