"""Write a job script atomically and submit it with sbatch (the only I/O of ckit launch)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import CommandFailed, LaunchError
from ..fsutil import atomic_path
from ..process import require, run


@dataclass(frozen=True)
class Submission:
    job_id: str
    script: Path
    exit_code: int | None = None


def write_script(text: str, path: Path, inputs: Iterable[Path] = ()) -> Path:
    """Write ``text`` to ``path`` (mode 0755) through a temp file in the same folder and a rename; the output
    guard refuses a device, a folder or one of ``inputs`` (e.g. the image file) at ``path``."""
    path = path.resolve()

    def same_text(tmp: Path) -> None:
        if tmp.read_text(encoding="utf-8") != text:
            raise LaunchError(f"{path}: written script differs from the rendered one")

    with atomic_path(path, mode=0o755, verify=same_text, inputs=inputs) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def submit(script: Path, *, wait: bool = False, cwd: Path | None = None) -> Submission:
    """``sbatch --parsable [--wait] SCRIPT``; with ``wait`` the job's exit code comes back too."""
    require("sbatch", purpose="submit the job", package="slurm-client")
    argv = ["sbatch", "--parsable", *(["--wait"] if wait else []), str(script)]
    try:
        result = run(argv, step="sbatch", cwd=cwd or script.parent, check=not wait)
    except CommandFailed as err:
        raise LaunchError(f"sbatch rejected {script}: {err.stderr_tail.strip()}",
                          hint="check the partition, account and resources with `ckit sites show`") from err
    match = re.search(r"^(\d+)", result.stdout.strip())
    if not match:
        raise LaunchError(f"sbatch gave no job id for {script}: {(result.stderr or result.stdout).strip()}")
    return Submission(job_id=match.group(1), script=script, exit_code=result.returncode if wait else None)
