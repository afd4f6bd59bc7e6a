"""Framework jobs ``ckit launch`` writes for an oci-shaped site, run by the real Pyxis 0.24.0 and enroot 4.1.2 on two
nodes (n1, n2): DDP, TensorFlow, MPI (``--mpi=pmi2``, the site's plugin) and Ray, each a real collective both ranks
check, in the framework test image as the .sqsh ``ckit build --to sqsh`` wrote (tests/integration/torch_image.py).

Its programs are found through the image's PATH (``python`` is /opt/venv's, which sees Debian's torch), which the
login shell enroot starts lost before. MPI runs MPICH (/opt/mpich): its PMI client talks to Slurm's pmi2, which
Debian's Open MPI (PMIx only) cannot. The jobs keep their container (``--keep-container``), so each node unpacks
the 3 GB image once for the module, not once per job; the module removes it at its end.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.pyxis_jobs import Cluster, Job, launch, pyxis_cluster
from tests.integration.torch_image import JOBS


@pytest.fixture(scope="module")
def cluster(slurm, tmp_path_factory) -> Iterator[Cluster]:  # type: ignore[no-untyped-def]
    with pyxis_cluster(slurm, tmp_path_factory.mktemp("pyxis")) as configured:
        yield configured


def run(cluster: Cluster, folder: Path, image: str, program: str, *args: str) -> tuple[Job, list[dict]]:
    """``program`` copied into the submit folder, launched on n1 and n2 in the image; the CKIT-RESULT lines."""
    shutil.copy(JOBS / program, folder / program)
    job = launch(cluster, folder, "-N", "2", "--image", image, "--keep-container", *args)
    results = [json.loads(line.split("CKIT-RESULT ", 1)[1]) for line in job.text.splitlines() if "CKIT-RESULT " in line]
    return job, sorted(results, key=lambda r: r.get("rank", 0))


def both_ranks_agree(results: list[dict], job: Job) -> None:
    assert [r["rank"] for r in results] == [0, 1], job.text
    assert {r["host"] for r in results} == {"n1", "n2"} and {r["world"] for r in results} == {2}, job.text


def test_ddp(cluster: Cluster, torch_sqsh: str, tmp_path: Path) -> None:
    job, results = run(cluster, tmp_path, torch_sqsh, "ddp_check.py", "--framework", "ddp", "--",
                       "python", "ddp_check.py")
    assert job.rc == 0, job.text
    both_ranks_agree(results, job)
    assert {r["allreduce"] for r in results} == {3.0} and all(r["same_params"] for r in results), job.text
    assert {r["master"] for r in results} == {"n1"} and {r["cwd"] for r in results} == {str(tmp_path)}


def test_tf_multiworker(cluster: Cluster, torch_sqsh: str, tmp_path: Path) -> None:
    job, results = run(cluster, tmp_path, torch_sqsh, "tf_check.py", "--framework", "tf", "--",
                       "python", "tf_check.py")
    assert job.rc == 0, job.text
    both_ranks_agree(results, job)
    assert results[0]["params"] == results[1]["params"], job.text
    assert [w.split(":")[0] for w in results[0]["workers"]] == ["n1", "n2"]


def test_mpi_over_pmi2(cluster: Cluster, torch_sqsh: str, tmp_path: Path) -> None:
    job, results = run(cluster, tmp_path, torch_sqsh, "mpi_check.py", "--framework", "mpi", "--",
                       "/opt/mpich/bin/python", "mpi_check.py")
    assert " --mpi=pmi2 " in job.script  # the oci site's plugin, not given on the command line
    assert job.rc == 0, job.text
    both_ranks_agree(results, job)
    assert {r["allreduce"] for r in results} == {3} and {tuple(r["hosts"]) for r in results} == {("n1", "n2")}


def test_ray(cluster: Cluster, torch_sqsh: str, tmp_path: Path) -> None:
    job, results = run(cluster, tmp_path, torch_sqsh, "ray_check.py", "--framework", "ray", "--",
                       "python", "ray_check.py")
    assert job.rc == 0, job.text
    (result,) = results
    assert result["nodes"] == 2 and result["addresses"] == ["10.233.0.11", "10.233.0.12"], job.text
    assert result["task_hosts"] == ["n1", "n2"] and result["driver"] == "n1"
