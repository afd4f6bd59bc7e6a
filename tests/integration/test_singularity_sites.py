"""The Singularity sites' job scripts, run for real: twnia2, tara and neuron (their profiles with this machine's
partitions, GPUs and folders, run by Apptainer: singularity_helpers.site_for_this_machine) write a 2-node job
that ``ckit launch`` submits to the test Slurm (partition multi: n1 and n2), and every task runs in the real
``singularity`` the site's module puts on PATH.

One image for the module: a framework image with PyTorch and Open MPI + mpi4py (tests/data/recipes
test-torch-mpi), built by podman. Its ``.sif`` comes four ways, spread over the sites and frameworks so each is
run at least twice: ``ckit build --to sif``, ``ckit convert`` (a store hit of the same conversion), ``ckit pull``
of what ``ckit push`` sent, and ``ckit stage`` of that push (tara's compute nodes have no internet: launch finds
the staged file under the reference). Horovod is not run: the image has no Horovod (building it is
tests/infra/frameworks.py's HorovodVenv, a host venv).
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.infra.containers import remove_images
from tests.integration.registry_helpers import ckit, unique_repo
from tests.integration.singularity_helpers import launch, module_folder, sites_for_this_machine

RECIPES = Path(__file__).parent.parent / "data" / "recipes"
# (site, framework) -> where the .sif comes from
MATRIX = {("twnia2", "none"): "convert", ("twnia2", "ddp"): "build", ("twnia2", "mpi"): "pull",
          ("tara", "none"): "stage", ("tara", "ddp"): "stage", ("tara", "mpi"): "stage",
          ("neuron", "none"): "pull", ("neuron", "ddp"): "convert", ("neuron", "mpi"): "build"}
PROGRAMS = {"none": "container_check.py", "ddp": "ddp_check.py", "mpi": "mpi_check.py"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with module_folder(tmp_path_factory, "sing-sites") as path:
        yield path


@pytest.fixture(scope="module")
def env(folder: Path, slurm: Any, podman: Any, apptainer: Any) -> dict[str, str]:
    sites = sites_for_this_machine(folder, slurm.cpus)
    return {"CKIT_CACHE_DIR": str(folder / "cache"), "CKIT_SITES_PATH": str(sites), "USER": getpass.getuser(),
            "CKIT_RECIPES_PATH": str(RECIPES)}


@pytest.fixture(scope="module")
def image(env: dict[str, str], folder: Path, debian_image: str) -> Iterator[dict[str, Any]]:
    """``ckit build test-torch-mpi --to image,sif --site twnia2``: the engine's tag and the .sif (the image is
    removed from podman's store when the module ends)."""
    import docker

    built = ckit("build", "test-torch-mpi", "--to", "image,sif", "--site", "twnia2", "-o", str(folder / "built"),
                 "--json", env=env)
    assert built.returncode == 0, built.stderr
    artifacts = {a["kind"]: a for a in json.loads(built.stdout)["artifacts"]}
    yield {"tag": artifacts["image"]["ref"], "sif": artifacts["sif"]["path"]}
    remove_images(docker.from_env(), [artifacts["image"]["ref"]])


@pytest.fixture(scope="module")
def sifs(image: dict[str, Any], env: dict[str, str], folder: Path, registry: Any) -> dict[str, str]:
    """What ``--image`` is for each source: a file (build, convert, pull) or the reference ``ckit stage`` staged."""
    converted = folder / "converted.sif"
    made = ckit("convert", f"docker-daemon:{image['tag']}", "--to", "sif", "--site", "neuron", "-o", str(converted),
                "--json", env=env)
    assert made.returncode == 0 and json.loads(made.stdout)["cache_hit"], made.stderr  # build converted it already
    ref = f"{registry.host}/{unique_repo('sing-fw')}:1"
    pushed = ckit("push", image["sif"], ref, "--site", "twnia2", env=env)
    assert pushed.returncode == 0, pushed.stderr
    pulled = ckit("pull", ref, "-o", str(folder / "pulled"), "--json", env=env)
    assert pulled.returncode == 0, pulled.stderr
    staged = ckit("stage", ref, "--site", "tara", "--json", env=env)
    assert staged.returncode == 0 and json.loads(staged.stdout)["target"] == "sif", staged.stderr
    return {"build": image["sif"], "convert": str(converted), "pull": json.loads(pulled.stdout)["path"],
            "stage": ref, "staged file": json.loads(staged.stdout)["path"]}


def _submit_folder(folder: Path, site: str, framework: str) -> Path:
    # neuron takes jobs only from its scratch folder (rule policy.submit_from, here under the module's folder)
    base = folder / "scratch" / getpass.getuser() if site == "neuron" else folder / "jobs"
    path = base / f"{site}-{framework}"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.parametrize(("site", "framework"), list(MATRIX), ids=[f"{s}-{f}-{MATRIX[s, f]}" for s, f in MATRIX])
def test_the_sites_script_runs_in_singularity(site: str, framework: str, sifs: dict[str, str], env: dict[str, str],
                                              folder: Path, apptainer: Any) -> None:
    source = MATRIX[site, framework]
    where = _submit_folder(folder, site, framework)
    mpi = ("--mpi", "pmix") if framework == "mpi" else ()  # Debian's Open MPI speaks PMIx only
    job = launch(site, where, env, "--env", f"MODULEPATH={apptainer.modulefiles}", "-N", "2",
                 "--image", sifs[source], "--framework", framework, *mpi, "--", "python3", PROGRAMS[framework],
                 program=PROGRAMS[framework])
    assert job.returncode == 0, job.log + job.ran.stderr
    script = (where / "sing.sbatch").read_text()
    assert "module load" in script and 'singularity exec "${CKIT_IMAGE}"' in script
    results = job.results
    assert [r["rank"] for r in results] == [0, 1] and [r["host"] for r in results] == ["n1", "n2"], job.log
    if framework == "none":
        image_file = sifs["staged file"] if source == "stage" else sifs[source]
        assert {r["container"] for r in results} == {Path(image_file).name}  # singularity's own variable
        assert {r["cwd"] for r in results} == {str(where)}
    elif framework == "ddp":
        assert {r["allreduce"] for r in results} == {3.0} and all(r["same_params"] for r in results), job.log
        assert {r["master"] for r in results} == {"n1"} and {r["cwd"] for r in results} == {str(where)}
    else:
        assert {r["allreduce"] for r in results} == {3} and {tuple(r["hosts"]) for r in results} == {("n1", "n2")}
