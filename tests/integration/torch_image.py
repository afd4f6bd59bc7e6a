"""The framework test image (``ckit build test-torch``, tests/data/recipes): Debian 12 with python3-torch, Open MPI
and mpi4py, tensorflow-cpu and ray in /opt/venv, MPICH with its own mpi4py in /opt/mpich; built once per test
session (3 GB, minutes) for every module that runs framework jobs in it (podman, Charliecloud, Pyxis).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from buildkit.cli import main
from buildkit.process import run

JOBS = Path(__file__).parent / "jobs"
RECIPES = Path(__file__).parent.parent / "data" / "recipes"


def build(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--recipes", str(RECIPES), "-q", "build", "test-torch", *args, "--json"]) == 0
    data: dict[str, Any] = json.loads(out.getvalue())
    return data


@contextlib.contextmanager
def memory_store() -> Iterator[Path]:
    """ckit's store in memory (a tmpfs) for the block: converting the 3 GB image spools its layers there beside
    the output, and the test machines have more memory than free disk."""
    folder = Path(tempfile.mkdtemp(prefix="ckit-torch-store-"))
    run(["mount", "-t", "tmpfs", "-o", "size=10g,mode=700", "tmpfs", str(folder)], timeout=30)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("CKIT_CACHE_DIR", str(folder))
            yield folder
    finally:
        run(["umount", "--lazy", str(folder)], timeout=30)
        folder.rmdir()


@contextlib.contextmanager
def torch_sqsh(wheels: Path) -> Iterator[str]:
    """The same build as a .sqsh (the image is a cache hit: one conversion), in a folder every user can read, on
    disk: the nodes' mount namespaces do not see mounts made after they started."""
    folder = Path(tempfile.mkdtemp(prefix="ckit-sqsh-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        with memory_store():
            built = build("--set", f"files.src={wheels}", "--to", "sqsh", "-o", str(folder))
        yield next(a["path"] for a in built["artifacts"] if a["kind"] == "sqsh")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
