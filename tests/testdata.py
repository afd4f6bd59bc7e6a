"""Test inputs that are not ckit's own and so stay out of the repository: the real SIF files written by apptainer
and the SIF reference library (sylabs/sif), with the reference siftool's own golden text. They live in
``../shared/testdata/sif`` beside the checkout (``CKIT_SHARED_DIR`` names another ``shared`` folder); its README
says where each file comes from."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class MissingTestData(RuntimeError):
    pass


def shared_dir() -> Path:
    return Path(os.environ.get("CKIT_SHARED_DIR") or ROOT.parent / "shared")


def sif_dir() -> Path:
    """The folder of reference SIF files; a clear error (never a skip) where it is not there."""
    path = shared_dir() / "testdata" / "sif"
    if not (path / "busybox_amd64.sif").is_file():
        raise MissingTestData(f"{path} has no busybox_amd64.sif: the SIF tests read the reference files in "
                              "../shared/testdata/sif beside the checkout (or CKIT_SHARED_DIR/testdata/sif)")
    return path


def seed_text(number: str) -> str:
    """The text of site guide NUMBER (``../shared/seeds/NUMBER_*.txt``): the acceptance reference, not copied."""
    folder = shared_dir() / "seeds"
    found = sorted(folder.glob(f"{number}_*.txt"))
    if not found:
        raise MissingTestData(f"{folder} has no {number}_*.txt: the tests read the site guides in ../shared/seeds "
                              "beside the checkout (or CKIT_SHARED_DIR/seeds)")
    return found[0].read_text(encoding="utf-8")


def seed_block(number: str, starts: str) -> str:
    """The fenced block of guide NUMBER whose first line starts with ``starts`` (without its fences)."""
    lines = seed_text(number).splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.startswith(starts) and index and lines[index - 1].startswith("```"):
            end = next(i for i in range(index, len(lines)) if lines[i].startswith("```"))
            return "".join(lines[index:end])
    raise MissingTestData(f"guide {number} has no block starting {starts!r}")


# what the guides show of their runs: seed 002's all_reduce_perf outputs, seed 003's rank table
def all_reduce_1node() -> str:
    return seed_block("002", '$ srun --container-name=tensorflow --container-mounts "/mnt/home/user_name:/mnt/home'
                             '/user_name" --mpi pmi2')


def all_reduce_2nodes() -> str:
    return seed_block("002", "$ srun -N 2 --ntasks-per-node 1 --container-name=tensorflow")


def hccl_rank_table() -> str:
    return seed_block("003", "{")
