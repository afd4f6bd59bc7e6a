"""ckit from Python on the real Slurm: submitit's pickled functions run by ``ckit.Executor`` in ckit's
containers on two nodes (Charliecloud with a ``.sqsh``, Apptainer with a ``.sif``), one result per
task, a remote exception with its traceback, cancel, a wait's timeout and Slurm's time limit, the versions
checked before queueing and in the task; ``ckit.launch`` of a command and its :class:`ckit.Job`; ``ckit logs``
and ``ckit jobs --since`` once Slurm forgot the job (no accounting here); the example of ``examples/`` run.

The image (tests/data/recipes test-submitit) is Debian's Python 3.11 with python3-torch, and this Python's
submitit and cloudpickle installed from their wheels; built once by ``ckit.build`` to an image, a ``.sqsh`` and
a ``.sif`` for twnia2 (its singularity 3.x reads gzip only).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from submitit.core.utils import FailedJobError, UncompletedJobError

import ckit
from buildkit.orchestration import executor as _executor
from buildkit.process import run
from tests.infra.containers import remove_images
from tests.integration.singularity_helpers import module_folder, site_for_this_machine

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the nodes cannot import this test module
RECIPES = Path(__file__).parent.parent / "data" / "recipes"
EXAMPLE = Path(__file__).parents[2] / "examples" / "functions_on_a_site.py"


def all_reduce_of_ranks(scale: float) -> dict[str, Any]:
    """In each task: a gloo all_reduce of rank + 1 over the job's tasks (ckit's DDP variables)."""
    import os
    import socket

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")  # MASTER_ADDR/PORT, RANK, WORLD_SIZE from ckit's ddp glue
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    result = {"rank": dist.get_rank(), "world": dist.get_world_size(), "host": socket.gethostname(),
              "sum": total.item() * scale, "master": os.environ["MASTER_ADDR"], "python": sys.executable}
    dist.destroy_process_group()
    return result


def fails_deep_inside(value: int) -> int:
    def check(v: int) -> int:
        raise ValueError(f"no good: {v}")

    return check(value)


def sleeps(seconds: float) -> str:
    import time

    time.sleep(seconds)
    return "woke up"


def final_state(job: Any) -> str:
    """The job's state once it is over, from ckit's handle (submitit's ``job.state`` is its last poll's)."""
    return ckit.Job(job.job_id).wait(timeout=120, poll=0.5).state


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with module_folder(tmp_path_factory, "api-fn") as path:
        yield path


@pytest.fixture(scope="module")
def wheels(folder: Path) -> Path:
    """This Python's submitit, cloudpickle and typing_extensions as wheels, with a requirements.txt that pins
    the two whose versions must match."""
    from importlib.metadata import version

    path = folder / "wheels"
    pins = [f"{name}=={version(name)}" for name in ("submitit", "cloudpickle", "typing_extensions")]
    run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
         "--no-deps", "--dest", str(path), *pins], timeout=600)
    (path / "requirements.txt").write_text("".join(f"{pin}\n" for pin in pins[:2]))
    return path


@pytest.fixture(scope="module")
def image(wheels: Path, folder: Path, podman: Any, debian_image: str) -> Iterator[dict[str, str]]:
    """``ckit.build`` of test-submitit to an image, a .sqsh and a .sif (removed from podman's store at the end)."""
    import docker

    built = ckit.build("test-submitit", sets=[f"files.src={wheels}"], to="image,sif,sqsh", site="twnia2",
                       output=folder / "built", recipes=[RECIPES])
    artifacts = {a.kind: a.location for a in built.artifacts}
    yield artifacts
    remove_images(docker.from_env(), [artifacts["image"]])


@pytest.fixture(scope="module")
def twnia2(folder: Path, slurm: Any, apptainer: Any) -> Path:
    """The twnia2 profile for this machine: partition multi (n1, n2), Apptainer by the site's singularity module."""
    return site_for_this_machine("twnia2", folder, slurm.cpus)


def executor(how: str, folder: Path, image: dict[str, str], request: pytest.FixtureRequest,
             **options: Any) -> _executor.Executor:
    """An executor on partition multi: ``charliecloud`` on the local site, or ``singularity`` on twnia2."""
    jobs = folder / "jobs"
    jobs.mkdir(exist_ok=True)
    if how == "charliecloud":
        request.getfixturevalue("charliecloud")
        ex = ckit.Executor(folder / "log_test", "local", image=image["sqsh"], runtime="charliecloud", cwd=jobs,
                           **options)
        ex.update_parameters(partition="multi")
        return ex
    sites = request.getfixturevalue("twnia2")
    apptainer = request.getfixturevalue("apptainer")
    ex = ckit.Executor(folder / "log_test", "twnia2", image=image["sif"], sites=[sites], cwd=jobs, **options)
    ex.update_parameters(account="P1", env={"MODULEPATH": str(apptainer.modulefiles)})
    return ex


@pytest.mark.parametrize("how", ["charliecloud", "singularity"])
def test_a_function_on_two_nodes_returns_each_ranks_result(slurm, folder, image, request, how):
    ex = executor(how, folder, image, request, framework="ddp")
    ex.update_parameters(nodes=2, tasks_per_node=1, timeout_min=5, name="allreduce")
    job = ex.submit(all_reduce_of_ranks, 2.0)
    results = job.results()
    assert [r["rank"] for r in results] == [0, 1] and [r["host"] for r in results] == ["n1", "n2"], job.stderr()
    assert {r["sum"] for r in results} == {6.0} and {r["world"] for r in results} == {2}
    assert {r["master"] for r in results} == {"n1"} and {r["python"] for r in results} == {"/opt/venv/bin/python3"}
    assert final_state(job) == "COMPLETED" and job.num_tasks == 2
    script = job.paths.submission_file.read_text()
    assert ("ch-run" if how == "charliecloud" else "singularity exec") in script and "submitit_main" in script


def test_an_exception_comes_back_with_the_remote_traceback(slurm, folder, image, request):
    ex = executor("charliecloud", folder, image, request)
    job = ex.submit(fails_deep_inside, 7)
    with pytest.raises(FailedJobError) as raised:
        job.result()
    text = str(raised.value)
    assert "ValueError: no good: 7" in text and "in check" in text and "in fails_deep_inside" in text, text
    assert final_state(job) == "FAILED"


def test_a_wait_times_out_and_cancel_ends_the_job(slurm, folder, image, request):
    ex = executor("charliecloud", folder, image, request)
    job = ex.submit(sleeps, 600)
    with pytest.raises(ckit.JobTimeout):
        job.wait(timeout=3)
    handle = ckit.Job(job.job_id)  # the same job through ckit's own handle
    assert handle.status().active
    job.cancel()
    final = handle.wait(timeout=120, poll=0.5)
    assert final.state == "CANCELLED" and not final.active
    with pytest.raises(UncompletedJobError) as raised:
        job.result()
    assert "CANCELLED" in str(raised.value)


def test_slurms_time_limit_ends_a_function_that_runs_too_long(slurm, folder, image, request):
    ex = executor("charliecloud", folder, image, request)
    ex.update_parameters(timeout_min=1)
    job = ex.submit(sleeps, 600)
    with pytest.raises(UncompletedJobError):
        job.result()  # returns once Slurm stopped it (TIMEOUT), not after the 600 s
    assert final_state(job) == "TIMEOUT"


def test_an_image_whose_python_differs_is_refused_before_queueing(slurm, folder, image, request, monkeypatch,
                                                                   busybox_sqsh):
    from buildkit.image.python import image_python

    found = image_python(Path(image["sqsh"]))
    assert found is not None and found.executable == "/opt/venv/bin/python3" and found.version == "3.11"
    assert found.packages["submitit"] == _executor.local_versions()["submitit"] and "torch" in found.packages
    assert image_python(Path(image["sif"])) == found
    monkeypatch.setenv("CKIT_CACHE_DIR", str(folder / "own-records"))  # this test's job records only
    ex = executor("charliecloud", folder, image, request)
    monkeypatch.setattr(_executor, "local_versions", lambda: {"python": "3.11", "submitit": "1.5.2",
                                                              "cloudpickle": "0.0.1"})
    with pytest.raises(ckit.ConfigError) as refused:
        ex.submit(sleeps, 0)
    assert "cloudpickle 3." in str(refused.value) and "(here: 0.0.1)" in str(refused.value)
    assert refused.value.exit_code == 2 and ckit.jobs(since="1h") == []  # nothing was queued
    bare = ckit.Executor(folder / "log_test", "local", image=str(busybox_sqsh), runtime="charliecloud")
    with pytest.raises(ckit.ConfigError, match="no python3 on the image's PATH"):
        bare.submit(sleeps, 0)
    unchecked = executor("charliecloud", folder, image, request, check_image=False)
    with pytest.raises(FailedJobError, match="cloudpickle 3.* \\(the submitting Python has 0.0.1\\)"):
        unchecked.submit(sleeps, 0).result()  # the task's own check, before it unpickles anything
    assert len(ckit.jobs(since="1h")) == 1


def test_launch_of_a_command_and_its_job_handle(slurm, folder, image, charliecloud):
    where = folder / "jobs"
    where.mkdir(exist_ok=True)
    request = ckit.LaunchRequest(command=("sh", "-c", 'echo "out $SLURM_PROCID"; echo "err $SLURM_PROCID" >&2'),
                                 image=image["sqsh"], runtime="charliecloud", partition="multi", nodes=2,
                                 name="apicmd", output="%x.o%j", error="%x.e%j")
    plan = ckit.plan_launch("local", request)
    assert "ch-run" in ckit.render(plan)
    job = ckit.submit(plan, cwd=where)
    final = job.wait(timeout=120, poll=0.5)
    assert final.state == "COMPLETED" and final.exit_code == 0 and job.exit_code == 0
    assert sorted(job.stdout().splitlines()) == ["out 0", "out 1"]
    assert sorted((job.stderr() or "").splitlines()) == ["err 0", "err 1"]
    assert job.logs().output == where / f"apicmd.o{job.job_id}"
    waited = ckit.launch("local", request, ckit.Execution(submit=True, wait=True, cwd=where))  # ckit launch --wait
    assert waited.exit_code == 0 and waited.job_id and waited.script == str(where / "apicmd.sbatch")


def _ckit(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "buildkit.cli", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)


def test_logs_and_history_once_slurm_forgot_the_job(slurm, folder, tmp_path):
    """MinJobAge=60 and no accounting here: after a minute only ckit's record of the job knows its logs."""
    where = folder / "forgotten"
    where.mkdir()
    done = _ckit("launch", "--site", "local", "-J", "gone", "-o", "%x.o%j", "-e", "%x.e%j", "--submit", "--wait",
                 "--json", "--", "sh", "-c", "echo to-out; echo to-err >&2", cwd=where)
    job = json.loads(done.stdout)["job_id"]
    deadline = time.monotonic() + 300
    while run(["scontrol", "show", "job", job], check=False, timeout=60).returncode == 0:
        assert time.monotonic() < deadline, "slurmctld kept the job past MinJobAge"
        time.sleep(2)
    assert run(["sacct", "-j", job], check=False, timeout=60).returncode != 0  # accounting_storage/none
    shown = _ckit("logs", job, cwd=tmp_path)  # another folder: the record names the files
    assert shown.returncode == 0 and shown.stdout == "to-out\nto-err\n", shown.stderr
    assert f"gone.e{job}" in shown.stderr
    data = json.loads(_ckit("logs", job, "--json", cwd=tmp_path).stdout)
    assert data["text"] == "to-out\n" and data["error_text"] == "to-err\n" and data["log"] == f"{where}/gone.o{job}"
    history = json.loads(_ckit("jobs", "--since", "1h", "--json", cwd=tmp_path).stdout)["jobs"]
    mine = [j for j in history if j["job_id"] == job]
    assert mine and mine[0]["state"] == "COMPLETED" and mine[0]["exit_code"] == 0 and mine[0]["source"] == "records"
    table = _ckit("jobs", "--since", "2d", cwd=tmp_path)
    assert table.returncode == 0 and "SUBMITTED" in table.stdout and f"{job}  gone" in table.stdout


def test_the_example_runs(slurm, image, charliecloud, folder):
    """examples/functions_on_a_site.py as a user runs it (python FILE), on this machine's site."""
    env = {**os.environ, "CKIT_EXAMPLE_IMAGE": image["sqsh"], "CKIT_EXAMPLE_PARTITION": "multi"}
    where = folder / "example"
    where.mkdir()
    done = subprocess.run([sys.executable, str(EXAMPLE)], cwd=where, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "add(5, 7) = 12" in done.stdout and "per task: [12, 12]" in done.stdout, done.stdout
    assert "all_reduce on 2 nodes: [3.0, 3.0]" in done.stdout and "ZeroDivisionError" in done.stdout, done.stdout
