"""What the seed guides' users do around a job, on the real Slurm: modules (Lmod) and a venv, a submit environment
without USER, ``ckit jobs``, ``ckit logs [-f]``, ``ckit cancel`` and ``ckit shell`` (through a pty)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import sys
import time
from pathlib import Path

import pytest

from buildkit.cli import main
from buildkit.launch.words import literal


def _ckit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(argv))
    return rc, capsys.readouterr().out


@pytest.mark.parametrize("export", ["ALL", "NONE"])
def test_modules_and_venv_reach_the_tasks(slurm, frameworks, tmp_path, monkeypatch, capsys, export):
    frameworks.write_modulefiles()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SBATCH_EXPORT", export)
    rc, out = _ckit(capsys, "launch", "--site", "local", "-J", "mod", "--env", f"MODULEPATH={frameworks.modulefiles}",
                    "--module", "ckit-test/1.0", "--venv", str(frameworks.path), "--submit", "--wait", "--json", "--",
                    "sh", "-c", literal('echo "MOD=$CKIT_TEST_MODULE"; ckit-test-tool; echo "PY=$(command -v python)"'))
    text = Path(json.loads(out)["output"]).read_text()
    assert rc == 0, text
    assert "MOD=loaded from lmod\nckit-test-tool from the module\n" in text
    assert f"PY={frameworks.path}/bin/python" in text


@pytest.mark.parametrize("runtime", ["podman", "charliecloud"])
def test_a_submit_environment_without_user(slurm, podman, busybox_image, tmp_path, monkeypatch, capsys, request,
                                           runtime):
    """set -u and ${USER} in a site mount: the script falls back to SLURM_JOB_USER (ch-run refuses to start
    without USER at all); the mount point of a .sqsh must exist in it (ckit's carry /mnt/0 … /mnt/9)."""
    if runtime == "podman":
        kind, image, dest = "{kind: podman, flags: [--network=host, --ulimit=nofile=4096:4096, " \
                            "--ulimit=nproc=4096:4096]}", busybox_image, "/data"
    else:
        kind, image, dest = "{kind: charliecloud}", str(request.getfixturevalue("busybox_sqsh")), "/mnt/0"
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "lab.yaml").write_text(
        f"name: lab\ndescription: {runtime} with a per-user mount\nscheduler: slurm\n"
        f"partitions: {{debug: {{cpus_per_node: 2}}}}\ndefault_partition: debug\nruntimes: [{kind}]\n"
        f"mounts: ['{tmp_path}/data-$USER:{dest}']\nshared_image_dir: null\ncompute_internet: true\n")
    (tmp_path / f"data-{os.environ.get('USER', 'root')}").mkdir()
    (tmp_path / f"data-{os.environ.get('USER', 'root')}" / "f").write_text("per-user data\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("USER", raising=False)
    monkeypatch.delenv("HOME", raising=False)
    rc, out = _ckit(capsys, "--sites", str(tmp_path / "sites"), "launch", "--site", "lab", "--image", image,
                    "-J", "nouser", "--submit", "--wait", "--json", "--", "cat", f"{dest}/f")
    text = Path(json.loads(out)["output"]).read_text()
    assert rc == 0 and text == "per-user data\n", text


def test_jobs_logs_and_cancel(slurm, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc, out = _ckit(capsys, "launch", "--site", "local", "-J", "sleeper", "--submit", "--json", "--",
                    "sh", "-c", "echo started; sleep 120")
    job = json.loads(out)["job_id"]
    deadline = time.monotonic() + 30
    while "started" not in (tmp_path / f"sleeper-{job}.out").read_text() if (tmp_path / f"sleeper-{job}.out").exists() \
            else True:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    rc, out = _ckit(capsys, "jobs", "--json")
    mine = [j for j in json.loads(out)["jobs"] if j["job_id"] == job]
    assert rc == 0 and mine and mine[0]["name"] == "sleeper" and mine[0]["state"] == "RUNNING"
    rc, out = _ckit(capsys, "logs", job, "--json")
    assert rc == 0 and json.loads(out)["text"] == "started\n"
    rc, out = _ckit(capsys, "cancel", job, "--json")
    assert rc == 0 and json.loads(out)["cancelled"] is True
    rc, out = _ckit(capsys, "logs", job, "-f")  # returns once the cancelled job is over
    assert rc == 0 and out.startswith("started\n")
    assert main(["logs", "12x"]) == 2 and main(["cancel", "not-a-job"]) == 2


def test_logs_follow_prints_until_the_job_ends(slurm, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc, out = _ckit(capsys, "launch", "--site", "local", "-J", "ticks", "--submit", "--json", "--",
                    "sh", "-c", literal("for i in 1 2 3; do echo tick $i; sleep 1; done"))
    job = json.loads(out)["job_id"]
    rc, out = _ckit(capsys, "logs", job, "--follow")
    assert rc == 0 and out == "tick 1\ntick 2\ntick 3\n"


def _in_a_pty(argv: list[str], typed: bytes, timeout: float = 90) -> tuple[int, str]:
    pid, fd = pty.fork()
    if pid == 0:  # the child: ckit on a terminal, as a user would run it
        os.execvp(argv[0], argv)
    out, sent, start = b"", False, time.monotonic()
    while time.monotonic() - start < timeout:
        if select.select([fd], [], [], 0.3)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        if not sent and (b"# " in out or b"$ " in out):  # the prompt
            os.write(fd, typed)
            sent = True
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


@pytest.mark.parametrize("runtime", ["podman", "charliecloud", "none"])
def test_shell_gives_a_terminal_on_a_compute_node(slurm, podman, busybox_image, tmp_path, monkeypatch, request,
                                                  runtime):
    monkeypatch.chdir(tmp_path)
    image = {"podman": ["--image", busybox_image]}.get(runtime, [])
    if runtime == "charliecloud":
        image = ["--image", str(request.getfixturevalue("busybox_sqsh"))]
    code, out = _in_a_pty([sys.executable, "-m", "buildkit.cli", "shell", "--site", "local", "--runtime", runtime, *image],
                          b"echo IN-$((6*7)) $(pwd) $SLURM_JOB_NAME; test -t 0 && echo TTY; exit 3\n")
    assert code == 3, out
    assert re.search(rf"IN-42 {re.escape(str(tmp_path))} ckit-shell\r?\n", out) and "TTY" in out, out
    if runtime != "none":
        assert "BusyBox" in out


def test_a_failing_rank_ends_the_job_instead_of_leaving_the_others_waiting(slurm, tmp_path, monkeypatch, capsys):
    """Rank 1 fails at once while rank 0 would wait (as in a collective): the step ends with the failure, long
    before the time limit (without --kill-on-bad-exit the job ran until TIMEOUT)."""
    monkeypatch.chdir(tmp_path)
    rc, out = _ckit(capsys, "launch", "--site", "local", "-p", "multi", "-N", "2", "-J", "badrank", "-t", "0:03:00",
                    "--runtime", "none", "--submit", "--wait", "--json", "--",
                    "sh", "-c", literal('if [ "$SLURM_PROCID" = 1 ]; then exit 3; fi; sleep 600'))
    job = json.loads(out)
    text = Path(job["output"]).read_text()
    assert rc != 0 and "task 1: Exited with exit code 3" in text, text
    assert "DUE TO TIME LIMIT" not in text and "Terminating StepId" in text, text
