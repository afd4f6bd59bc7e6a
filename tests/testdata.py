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
