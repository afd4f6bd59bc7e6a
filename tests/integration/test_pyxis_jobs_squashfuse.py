"""The jobs of test_pyxis_jobs with Pyxis configured ``use_squashfuse=1`` (Pyxis ≥ 0.22) and a site profile that
says so (``squashfuse: true``): a .sqsh by absolute and by relative path, and a registry reference ckit pushed.

Pyxis starts a container straight from the squashfs (squashfuse + overlay, no ``enroot create``) only when it is
unnamed: ckit's jobs for a .sqsh then name none, and no node unpacks anything (Pyxis's own log says so). A
registry reference without an importer is still imported and unpacked by enroot (a named container per job), and
so is a kept container (``--keep-container``).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import pyxis_jobs as jobs


@pytest.fixture(scope="module")
def cluster(slurm, tmp_path_factory) -> Iterator[jobs.Cluster]:  # type: ignore[no-untyped-def]
    with jobs.pyxis_cluster(slurm, tmp_path_factory.mktemp("pyxis"), squashfuse=True) as configured:
        yield configured


@pytest.fixture(scope="module")
def work(podman, debian_image, tmp_path_factory) -> Iterator[jobs.WorkImage]:  # type: ignore[no-untyped-def]
    with jobs.nodes_registry() as registry, jobs.work_image(debian_image, registry, tmp_path_factory.mktemp("work")) as image:
        yield image


def test_pyxis_starts_an_unnamed_container_from_the_squashfs(cluster: jobs.Cluster, work: jobs.WorkImage) -> None:
    """The configuration is in effect: a plain step's root is an overlay on the squashfuse mount of the file."""
    done = subprocess.run(["srun", "-p", "multi", "-w", "n1", f"--container-image={work.sqsh}",  # noqa: S607
                           "cat", "/proc/mounts"], env={**os.environ, **cluster.env}, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert [line.split()[2] for line in done.stdout.splitlines() if line.split()[1] == "/"] == ["overlay"], done.stdout
    assert cluster.containers() == {"n1": [], "n2": []}  # nothing unpacked


def test_a_sqsh_by_absolute_path(cluster: jobs.Cluster, work: jobs.WorkImage, tmp_path: Path) -> None:
    """Both nodes start the job's step straight from the file: nothing unpacked, no container to remove."""
    job = jobs.ran_clean(cluster, work, tmp_path, "--image", str(work.sqsh))
    assert "--container-name" not in job.script and "ckit_remove_container" not in job.script
    log = cluster.pyxis_log(job.job_id)
    assert sum(f"pyxis: starting container from squashfs: {work.sqsh}" in line for line in log) == 2, log
    assert cluster.unpacked(job.job_id) == 0, log


def test_a_sqsh_by_relative_path(cluster: jobs.Cluster, work: jobs.WorkImage, tmp_path: Path) -> None:
    os.link(work.sqsh, tmp_path / "work.sqsh")
    jobs.ran_clean(cluster, work, tmp_path, "--image", "work.sqsh", "--workdir", jobs.WORKDIR, cwd=jobs.WORKDIR)


def test_a_registry_reference_ckit_pushed(cluster: jobs.Cluster, work: jobs.WorkImage, tmp_path: Path) -> None:
    """Without an importer Pyxis imports and unpacks a reference whatever use_squashfuse says: the job names its
    container, and its script says why."""
    job = jobs.ran_clean(cluster, work, tmp_path, "--image", work.ref, export_none=True)
    assert "no importer: in the site's profile" in job.script and cluster.unpacked(job.job_id) == 2


def test_a_kept_container_is_unpacked_even_so(cluster: jobs.Cluster, work: jobs.WorkImage, tmp_path: Path) -> None:
    """What squashfuse does not change for ckit's jobs: a kept (named) container is a real one on each node."""
    try:
        job = jobs.launch(cluster, tmp_path, "-N", "2", "--image", str(work.sqsh), "--keep-container", "--", "report")
        assert job.rc == 0, job.text
        assert [len(names) for names in cluster.containers().values()] == [1, 1]
        assert cluster.unpacked(job.job_id) == 2
    finally:
        cluster.remove_containers()
