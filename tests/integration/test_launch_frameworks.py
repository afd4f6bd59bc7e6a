"""The real-run matrix: 2-task jobs written and submitted by ``ckit launch`` on the local Slurm's two namespaced
nodes (partition ``multi``: n1 and n2, two hosts, two addresses), each doing a real collective whose result both
ranks must agree on. Images are built by ``ckit build`` from a test recipe; ``--runtime none`` jobs use a venv
(Debian's python3-torch and mpi4py, tensorflow-cpu and ray from PyPI: tests/infra/frameworks.py), and
``--runtime charliecloud`` jobs the same image as a ``.sqsh`` (``ckit build … --to sqsh``), which carries all four.

How a job is submitted is one axis, not a factor of every other: each framework runs in both submission modes
(by ckit with ``SBATCH_EXPORT=NONE`` in the submit environment, and the same script by ``sbatch --export=NONE``;
neither may keep ckit's variables from the tasks), spread over its runtimes and launchers rather than crossed with
them. Charliecloud jobs run both ways: as root (ckit submits) and as an unprivileged user (``sbatch --export=NONE``
run by that user, from a folder it owns): ch-run needs no privilege.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from buildkit.cli import main
from buildkit.launch.slurmjobs import wait_for
from buildkit.process import run
from tests.integration.torch_image import JOBS

MODES = ("SBATCH_EXPORT=NONE", "sbatch --export=NONE")
# Debian 12's torchrun (torch 1.13 on Python 3.11) crashes on its own defaults: `--redirects 0` maps to None
# because Python 3.11 no longer lists a zero IntFlag member (fixed in torch 2.0). A mapping for a local rank
# that does not exist redirects nothing and takes the working code path (read from PET_*, as torchrun allows).
TORCHRUN_ENV = ("--env", "PET_REDIRECTS=9:1", "--env", "PET_TEE=9:1")


@dataclass(frozen=True)
class How:
    """Where the tasks run and how the job is submitted."""

    runtime: str  # podman, none or charliecloud
    mode: str  # one of MODES
    user: bool = False  # submitted by the unprivileged test user

    def __str__(self) -> str:
        return f"{self.runtime}-{'user' if self.user else 'root'}-{'env' if self.mode == MODES[0] else 'flag'}"


CHARLIECLOUD = (How("charliecloud", MODES[0]), How("charliecloud", MODES[1], user=True))
# torch in the image: each runtime and each submission mode with both launchers, not every product of the three
IN_IMAGE = ((How("podman", MODES[0]), "srun"), (How("podman", MODES[1]), "torchrun"),
            (CHARLIECLOUD[0], "torchrun"), (CHARLIECLOUD[1], "srun"))
ON_NODE = (How("none", MODES[1]), *CHARLIECLOUD)  # a venv on the node, or the image: both modes, both users


@pytest.fixture
def user_folder(charliecloud) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """A submit folder the unprivileged user owns (under /tmp, which ch-run shares with the container)."""
    folder = Path(tempfile.mkdtemp(prefix="ckit-job-", dir="/tmp"))
    shutil.chown(folder, charliecloud.user.pw_uid, charliecloud.user.pw_gid)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def runtime_args(request: pytest.FixtureRequest, how: How) -> tuple[list[str], str]:
    """``--runtime …`` and its image or venv, and the python to call."""
    if how.runtime == "charliecloud":
        return ["--runtime", "charliecloud", "--image", request.getfixturevalue("torch_sqsh")], "python"
    if how.runtime == "podman":
        env = [f"--env={k}={v}" for k, v in request.getfixturevalue("podman").env.items()
               if k.startswith("CONTAINERS_")]
        return ["--runtime", "podman", "--image", request.getfixturevalue("torch_image"), *env], "python3"
    return ["--runtime", "none", "--venv", str(request.getfixturevalue("frameworks").path)], "python"


def submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], mode: str,
           program: str, *args: str, user: str | None = None) -> tuple[int, list[dict], str]:
    """Copy ``program`` into the submit folder, launch it on partition multi; the CKIT-RESULT lines of the log.
    With ``user``, ``tmp_path`` is a folder that user owns and the user submits the script ckit wrote."""
    shutil.copy(JOBS / program, tmp_path / program)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    argv = ["launch", "--site", "local", "-p", "multi", "-N", "2", "-J", "fw", "--script", "fw.sbatch", *args]
    if mode == "SBATCH_EXPORT=NONE":
        assert user is None, "a user's job is submitted by the user (sbatch --export=NONE)"
        monkeypatch.setenv("SBATCH_EXPORT", "NONE")
        rc = main([*argv[:1], "--json", *argv[1:3], "--submit", "--wait", *argv[3:]])
        job = json.loads(capsys.readouterr().out)["job_id"]
    else:
        assert main([argv[0], "--no-submit", *argv[1:]]) == 0
        as_user = ["runuser", "-u", user, "--"] if user else []
        job = run([*as_user, "sbatch", "--export=NONE", "--parsable", "fw.sbatch"], timeout=60).stdout.strip()
        job = job.split(";")[0]
        rc = wait_for(job, poll=0.5)  # what --wait does (sbatch --wait's backoff would add ~30 s per job)
    text = (tmp_path / f"fw-{job}.out").read_text(errors="replace")
    # horovodrun prefixes its processes' lines ("[0]<stdout>:")
    results = [json.loads(line.split("CKIT-RESULT ", 1)[1]) for line in text.splitlines() if "CKIT-RESULT " in line]
    return rc, sorted(results, key=lambda r: r.get("rank", 0)), text


@pytest.fixture
def job(request, tmp_path, monkeypatch, capsys):  # type: ignore[no-untyped-def]
    """``job(how, program, *args)``: :func:`submit` as ``how`` says, in a folder of the right owner."""

    def launch(how: How, program: str, *args: str) -> tuple[int, list[dict], str, Path]:
        folder, user = tmp_path, None
        if how.user:
            folder, user = request.getfixturevalue("user_folder"), request.getfixturevalue("charliecloud").user.pw_name
        return (*submit(folder, monkeypatch, capsys, how.mode, program, *args, user=user), folder)

    return launch


def both_ranks_agree(results: list[dict], text: str) -> None:
    assert [r["rank"] for r in results] == [0, 1], text
    assert {r["host"] for r in results} == {"n1", "n2"} and {r["world"] for r in results} == {2}, text


@pytest.mark.parametrize(("how", "launcher"), IN_IMAGE, ids=lambda v: str(v))
def test_ddp_in_the_image(slurm, request, job, how, launcher):
    runtime, python = runtime_args(request, how)
    rc, results, text, folder = job(how, "ddp_check.py", *runtime, "--framework", "ddp", "--launcher", launcher,
                                    *(TORCHRUN_ENV if launcher == "torchrun" else ()), "--", python, "ddp_check.py")
    assert rc == 0, text
    both_ranks_agree(results, text)
    assert {r["allreduce"] for r in results} == {3.0} and all(r["same_params"] for r in results), text
    assert results[0]["params"] == results[1]["params"] and {r["master"] for r in results} == {"n1"}
    assert {r["cwd"] for r in results} == {str(folder)}  # the submit folder, mounted and started in


@pytest.mark.parametrize(("mode", "launcher"), [(MODES[0], "srun"), (MODES[1], "torchrun")])
def test_ddp_from_a_venv(slurm, frameworks, tmp_path, monkeypatch, capsys, mode, launcher):
    rc, results, text = submit(tmp_path, monkeypatch, capsys, mode, "ddp_check.py", "--runtime", "none",
                               "--venv", str(frameworks.path), "--framework", "ddp", "--launcher", launcher,
                               *(TORCHRUN_ENV if launcher == "torchrun" else ()), "--", "python", "ddp_check.py")
    assert rc == 0, text
    both_ranks_agree(results, text)
    assert {r["allreduce"] for r in results} == {3.0} and results[0]["params"] == results[1]["params"], text
    assert [r["local_rank"] for r in results] == [0, 0]


@pytest.mark.parametrize("how", ON_NODE, ids=str)
def test_mpi_allreduce(slurm, request, job, how):
    """Debian's Open MPI speaks PMIx only (no PMI-2 client: ompi_info lists pmix ext3x/isolated/flux), so --mpi pmix."""
    runtime, python = runtime_args(request, how)
    rc, results, text, _ = job(how, "mpi_check.py", *runtime, "--framework", "mpi", "--mpi", "pmix",
                               "--", python, "mpi_check.py")
    assert rc == 0, text
    both_ranks_agree(results, text)
    assert {r["allreduce"] for r in results} == {3} and {tuple(r["hosts"]) for r in results} == {("n1", "n2")}


def test_mpi_ranks_of_a_node_share_one_charliecloud_container(slurm, torch_sqsh, tmp_path, monkeypatch, capsys):
    """Two ranks per node: ch-run --join puts them in one user namespace, so Open MPI's single-copy shared
    memory (CMA) works (in two containers it warns "CMA is not available due to different user namespaces")."""
    rc, results, text = submit(tmp_path, monkeypatch, capsys, MODES[0], "mpi_check.py", "--tasks-per-node", "2",
                               "--runtime", "charliecloud", "--image", torch_sqsh, "--framework", "mpi",
                               "--mpi", "pmix", "--", "python", "mpi_check.py")
    assert rc == 0, text
    assert [r["rank"] for r in results] == [0, 1, 2, 3] and {r["allreduce"] for r in results} == {10}, text
    assert "CMA is" not in text and "different user namespaces" not in text


@pytest.mark.parametrize("how", ON_NODE, ids=str)
def test_tf_multiworker_one_step(slurm, request, job, how):
    runtime, python = runtime_args(request, how)
    rc, results, text, _ = job(how, "tf_check.py", *runtime, "--framework", "tf", "--", python, "tf_check.py")
    assert rc == 0, text
    both_ranks_agree(results, text)
    assert results[0]["params"] == results[1]["params"], text
    assert [w.split(":")[0] for w in results[0]["workers"]] == ["n1", "n2"]


@pytest.mark.parametrize("how", ON_NODE, ids=str)
def test_ray_driver_sees_both_nodes(slurm, request, job, how):
    runtime, python = runtime_args(request, how)
    # Ray's temp dir is per node (/tmp/ray), not per user: root's runs left their files there, so a second user
    # on the same nodes needs a folder of its own (as on any shared node)
    own = ["--env", f"RAY_TMPDIR=/tmp/ray/{request.getfixturevalue('charliecloud').user.pw_name}"] if how.user else []
    rc, results, text, _ = job(how, "ray_check.py", *runtime, *own, "--framework", "ray",
                               "--", python, "ray_check.py")
    assert rc == 0, text
    (result,) = results
    assert result["nodes"] == 2 and result["addresses"] == ["10.233.0.11", "10.233.0.12"], text
    assert result["task_hosts"] == ["n1", "n2"] and result["driver"] == "n1"

@pytest.mark.parametrize(("mode", "table"), [(MODES[0], "v1"), (MODES[1], "legacy")])
def test_mindspore_device_loop_and_rank_table(slurm, tmp_path, monkeypatch, capsys, mode, table):
    hccn = tmp_path / "hccn.conf"
    hccn.write_text("".join(f"address_{i}=192.168.{i}.1\n" for i in range(2)))
    rc, results, text = submit(tmp_path, monkeypatch, capsys, mode, "mindspore_check.py", "--runtime", "none",
                               "--framework", "mindspore", "--rank-table", table, "--devices-per-node", "2",
                               "--env", f"CKIT_HCCN_CONF={hccn}", "--", "/usr/bin/python3", "mindspore_check.py")
    assert rc == 0, text
    assert [(r["rank"], r["device"], r["world"], r["device_num"]) for r in results] == \
        [(0, 0, 4, 2), (1, 1, 4, 2), (2, 0, 4, 2), (3, 1, 4, 2)], text
    assert [r["host"] for r in results] == ["n1", "n1", "n2", "n2"]
    assert [r["table_device"] for r in results] == ["0", "1", "0", "1"]
    for r in results:  # each in its own folder, with the code of the submit folder next to it
        assert Path(r["cwd"]).name == f"rank{r['rank']}" and "mindspore_check.py" in r["next_to_me"]
        assert (Path(r["cwd"]) / "written-by-rank").read_text() == str(r["rank"])


@pytest.mark.parametrize("mode", MODES[1:])
def test_horovod_gloo(slurm, horovod, tmp_path, monkeypatch, capsys, mode):
    """horovodrun --gloo with two processes on one node: on two nodes horovodrun would ssh to the other one,
    and the test nodes run no sshd (Gloo without MPI has no srun path: its rendezvous is horovodrun's)."""
    rc, results, text = submit(tmp_path, monkeypatch, capsys, mode, "hvd_check.py", "-p", "debug", "-N", "1",
                               "--runtime", "none", "--venv", str(horovod.path), "--framework", "horovod",
                               "--launcher", "horovodrun", "--gloo", "--devices-per-node", "2",
                               "--", "python", "hvd_check.py")
    assert rc == 0, text
    assert [r["rank"] for r in results] == [0, 1] and {r["world"] for r in results} == {2}, text
    assert {r["allreduce"] for r in results} == {3.0} and results[0]["params"] == results[1]["params"], text
