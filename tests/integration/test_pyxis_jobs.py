"""The jobs ``ckit launch`` writes for an oci-shaped site, run by the real Pyxis 0.24.0 and enroot 4.1.2 on two
nodes (n1, n2) of the test Slurm, Pyxis as the oci site configures it (``container_scope=global``, no
squashfuse, no importer): a .sqsh ``ckit convert`` wrote, by absolute and by relative path, and the same image
from the registry (``ckit push``'s default format, which enroot pulls); under ``sbatch --export=NONE``; with
``--keep-container`` and the file replaced. Each job: the image's PATH and WORKDIR reach the program, the
submit folder (or ``--workdir``) is where it starts, and no container is left on any node afterwards.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.pyxis_jobs import (
    IMAGE_PATH,
    WORKDIR,
    Cluster,
    WorkImage,
    launch,
    nodes_registry,
    pyxis_cluster,
    ran_clean,
    ran_everywhere,
    work_image,
)
from tests.integration.registry_helpers import ckit


@pytest.fixture(scope="module")
def cluster(slurm, tmp_path_factory) -> Iterator[Cluster]:  # type: ignore[no-untyped-def]
    with pyxis_cluster(slurm, tmp_path_factory.mktemp("pyxis")) as configured:
        yield configured


@pytest.fixture(scope="module")
def registry(cluster: Cluster) -> Iterator[str]:
    with nodes_registry() as host:
        yield host


@pytest.fixture(scope="module")
def work(podman, debian_image, registry, tmp_path_factory) -> Iterator[WorkImage]:  # type: ignore[no-untyped-def]
    with work_image(debian_image, registry, tmp_path_factory.mktemp("work")) as image:
        yield image


def test_a_sqsh_by_absolute_path(cluster: Cluster, work: WorkImage, tmp_path: Path) -> None:
    """Before: the image's PATH was lost to the login shell's /etc/profile (`report: No such file or directory`)."""
    ran_clean(cluster, work, tmp_path, "--image", str(work.sqsh))


def test_a_sqsh_by_relative_path_as_the_readme_writes_it(cluster: Cluster, work: WorkImage, tmp_path: Path) -> None:
    """`--image images/x.sqsh`: before, the script said CKIT_IMAGE=images/x.sqsh and Pyxis pulled a registry
    image of that name (a file is only what starts with / or .)."""
    (tmp_path / "images").mkdir()
    os.link(work.sqsh, tmp_path / "images" / "work.sqsh")
    job = ran_clean(cluster, work, tmp_path, "--image", "images/work.sqsh")
    assert f"export CKIT_IMAGE={tmp_path}/images/work.sqsh\n" in job.script


def test_a_missing_image_file_is_refused_before_anything_runs(cluster: Cluster, tmp_path: Path) -> None:
    """Before: exit 0 and a script Pyxis failed on (it tried to pull `nope.sqsh` from Docker Hub)."""
    done = ckit("launch", "--site", "ocilocal", "--image", "nope.sqsh", "--submit", "--", "report", env=cluster.env,
                cwd=tmp_path)
    assert done.returncode == 2
    assert f"--image nope.sqsh: {tmp_path}/nope.sqsh does not exist" in done.stderr and "hint:" in done.stderr
    assert list(tmp_path.iterdir()) == []  # no script, no job


def test_a_registry_reference_ckit_pushed_starting_in_the_workdir(cluster: Cluster, work: WorkImage, registry: str,
                                                                 tmp_path: Path) -> None:
    """Each node's enroot pulls the reference itself (Docker schema 2, plain http as its enroot.conf allows)."""
    job = ran_clean(cluster, work, tmp_path, "--image", work.ref, "--workdir", WORKDIR, cwd=WORKDIR)
    assert re.search(rf"^export CKIT_IMAGE='{re.escape(registry)}#ckit-pyxis/\w+:1'$", job.script, re.M)


def test_sbatch_export_none(cluster: Cluster, work: WorkImage, tmp_path: Path) -> None:
    """The batch shell has only the login environment Slurm makes on the node: ckit's variables still reach the
    tasks, and the node's enroot removes the container."""
    job = ran_clean(cluster, work, tmp_path, "--image", str(work.sqsh), "--env", "CKIT_PROBE=seen", export_none=True)
    assert {r["probe"] for r in job.reports()} == {"seen"}


def test_env_values_naming_variables_are_read_in_each_container(cluster: Cluster, work: WorkImage,
                                                                tmp_path: Path) -> None:
    """``--env 'PATH=…:$PATH'`` (seed 001's line) prepends to the image's PATH inside each container, and a value
    naming ``$SLURM_PROCID`` is each task's own; the batch shell keeps its PATH (the job runs at all)."""
    job = launch(cluster, tmp_path, "-N", "2", "--image", str(work.sqsh), "--env", "PATH=/opt/extra/bin:$PATH",
                 "--env", "CKIT_PROBE=rank-$SLURM_PROCID", "--", "report")
    assert job.rc == 0, job.text
    reports = job.reports()
    assert [(r["host"], r["probe"]) for r in reports] == [("n1", "rank-0"), ("n2", "rank-1")], job.text
    assert {r["path"] for r in reports} == {f"/opt/extra/bin:{IMAGE_PATH}"}, job.text


def test_a_kept_container_follows_the_image_file(cluster: Cluster, work: WorkImage, debian_image: str,
                                                 registry: str, tmp_path: Path) -> None:
    """--keep-container: the container stays for the next job, named after the file; a file replaced under the
    same path is run from a new container, never from the old one."""
    path = tmp_path / "kept.sqsh"
    shutil.copy(work.sqsh, path)
    try:
        first = launch(cluster, tmp_path, "-N", "2", "--image", str(path), "--keep-container", "--", "report")
        assert first.rc == 0, first.text
        kept = cluster.containers()
        assert [len(names) for names in kept.values()] == [1, 1] and kept["n1"] == kept["n2"]
        again = launch(cluster, tmp_path, "-N", "2", "--image", str(path), "--keep-container", "--", "report")
        assert again.rc == 0 and cluster.containers() == kept  # reused, no second copy
        with work_image(debian_image, registry, tmp_path / "other") as other:
            os.replace(other.sqsh, path)
            replaced = launch(cluster, tmp_path, "-N", "2", "--image", str(path), "--keep-container", "--", "report")
            assert replaced.rc == 0, replaced.text
            ran_everywhere(replaced, other, cwd=str(tmp_path))
        now = cluster.containers()
        assert all(set(kept[node]) < set(now[node]) and len(now[node]) == 2 for node in now)
    finally:
        cluster.remove_containers()


def test_a_container_that_stays_is_named_in_the_output(cluster: Cluster, work: WorkImage, tmp_path: Path) -> None:
    """A job whose PATH lacks enroot (here: submitted with PATH=/usr/bin:/bin, enroot being in /usr/local/bin on
    the nodes) cannot remove its container: each node says which container stays and how to remove it, and the
    job's exit code stays the program's. Before: `>/dev/null 2>&1 || true`, and nothing said so."""
    try:
        job = launch(cluster, tmp_path, "-N", "2", "--image", str(work.sqsh), "--", "report",
                     env={"PATH": "/usr/bin:/bin"})
        assert job.rc == 0, job.text
        ran_everywhere(job, work, cwd=str(tmp_path))
        name = f"pyxis_ckit-{job.job_id}"
        assert cluster.containers() == {"n1": [name], "n2": [name]}
        for node in ("n1", "n2"):
            assert f"ckit: warning: container {name} is left on {node}: enroot is not on the PATH of the job " \
                   f"(/usr/bin:/bin); remove it there with: enroot remove --force {name}" in job.text
    finally:
        cluster.remove_containers()
