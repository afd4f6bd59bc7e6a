"""Registry references through ckit's importer with Pyxis configured ``importer=`` and ``use_squashfuse=1``: the
importer's file must stay valid until ``release`` (Pyxis skips the first of its two release calls then). ckit's
jobs name their container, so Pyxis still unpacks the file on each node (see test_pyxis_jobs_squashfuse); a plain
unnamed step starts straight from the importer's file.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.importer_jobs import Importing, enroot_layers, importing, served_from_cache
from tests.integration.pyxis_jobs import ran_clean


@pytest.fixture(scope="module")
def setup(slurm, podman, debian_image, tmp_path_factory) -> Iterator[Importing]:  # type: ignore[no-untyped-def]
    with importing(slurm, debian_image, tmp_path_factory.mktemp("importer"), squashfuse=True) as ready:
        yield ready


def test_an_unnamed_step_starts_from_the_importers_file(setup: Importing) -> None:
    ref = setup.work.ref.replace("/", "#", 1)
    done = subprocess.run(["srun", "-p", "multi", "-w", "n2", f"--container-image={ref}", "report"],  # noqa: S607
                          env={**os.environ, **setup.cluster.env, "ENROOT_LOGIN_SHELL": "no"},  # as ckit's jobs
                          capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert f"image={setup.work.name}" in done.stdout and setup.cluster.containers() == {"n1": [], "n2": []}


def test_a_reference_by_tag_and_by_digest(setup: Importing, tmp_path: Path) -> None:
    pulled = enroot_layers(setup.cluster)
    for ref in (setup.work.ref, setup.work.pinned):
        ran_clean(setup.cluster, setup.work, tmp_path, "--image", ref)
        served_from_cache(setup, ref)
    assert enroot_layers(setup.cluster) == pulled
