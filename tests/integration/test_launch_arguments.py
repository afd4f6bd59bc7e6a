"""Command lines mean what they say, run on the local Slurm: a ``sh -c`` script's own variables reach its shell,
awk's ``$1``, ``$(…)`` and ``${X:-y}`` reach the program as written, the job's own ``$SLURM_PROCID`` is filled in
per task, a command without a framework runs once per node, and ``ckit.Executor`` asks for what submitit asks
for (one task, no GPUs) on a profile whose partition has GPUs."""

from __future__ import annotations

import operator
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import ckit
from tests.integration.test_launch_guides import _launch, _log


def test_a_shell_scripts_own_variables_reach_its_shell(slurm, tmp_path, monkeypatch, capsys):
    rc, data = _launch(tmp_path, monkeypatch, capsys, "--runtime", "none", "--",
                       "sh", "-c", 'for f in a b; do echo "v=$f task=$SLURM_PROCID"; done')
    text = _log(tmp_path, data)
    assert rc == 0 and text == "v=a task=0\nv=b task=0\n", text


def test_everyday_lines_reach_the_program_as_written(slurm, tmp_path, monkeypatch, capsys):
    (tmp_path / "f").write_text("a b\nc d\n")
    rc, data = _launch(tmp_path, monkeypatch, capsys, "--runtime", "none", "--", "awk", "{print $1}", "f")
    assert rc == 0 and _log(tmp_path, data) == "a\nc\n", _log(tmp_path, data)
    rc, data = _launch(tmp_path, monkeypatch, capsys, "--runtime", "none", "--", "sh", "-c",
                       'cd /tmp && echo "$(pwd) ${X:-default} $? `echo tick` price=\\$$5"')
    assert rc == 0 and _log(tmp_path, data) == "/tmp default 0 tick price=$5\n", _log(tmp_path, data)


def test_a_variable_this_job_does_not_set_is_refused_before_queueing(slurm, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = ckit_main(["launch", "--site", "local", "--runtime", "none", "--submit", "--",
                    "echo", "tcp://$MASTER_ADDR:$MASTER_PORT"])
    err = capsys.readouterr().err
    assert rc == 2 and "$MASTER_ADDR is set by --framework ddp" in err and "--env MASTER_ADDR=VALUE" in err, err
    assert not list(tmp_path.iterdir())  # nothing written, nothing queued


def test_a_command_without_a_framework_runs_once_per_node(slurm, tmp_path, monkeypatch, capsys):
    rc, data = _launch(tmp_path, monkeypatch, capsys, "-p", "multi", "-N", "2", "--runtime", "none", "--",
                       "sh", "-c", 'echo "copy $(hostname) $SLURM_PROCID"')
    text = _log(tmp_path, data)
    assert rc == 0, text
    assert sorted(line for line in text.splitlines() if line.startswith("copy ")) == ["copy n1 0", "copy n2 1"]
    assert data["runs"] == "sh runs 2×: 1 per node on 2 nodes"
    assert "# sh runs 2×: 1 per node on 2 nodes\n" in (tmp_path / "g.sbatch").read_text()


@pytest.fixture
def gpu_profile(tmp_path: Path) -> Path:
    """The local site with 2 GPUs a node claimed for partition debug (as neuron's cas_v100_2 has): a job that
    asked for them (--gres=gpu:2) would be refused by this Slurm, which has none."""
    profile = yaml.safe_load((Path(__file__).parents[2] / "sites" / "local.yaml").read_text())
    profile["partitions"]["debug"]["gpus_per_node"] = 2
    folder = tmp_path / "sites"
    folder.mkdir()
    (folder / "local.yaml").write_text(yaml.safe_dump(profile))
    return folder


def test_the_guides_first_submitit_example_runs_as_written(slurm, gpu_profile, tmp_path):
    executor = ckit.Executor(tmp_path / "log_test", "local", runtime="none", python=sys.executable,
                             sites=[gpu_profile], cwd=tmp_path)
    executor.update_parameters(partition="debug", timeout_min=5)
    assert (executor.plan().total_tasks, executor.plan().gpus_per_node) == (1, 0)
    job = executor.submit(operator.add, 5, 7)  # the guide's add(), importable on the node as it is
    assert job.result() == 12


def ckit_main(argv: list[str]) -> int:
    from buildkit.cli import main

    return main(argv)


def test_a_log_per_node_as_the_oci_guides_workers_write_them(slurm, tmp_path, monkeypatch, capsys):
    """``-o %N.out`` on two nodes: each node's tasks write its own file (the guide's ``HOSTNAME.out``)."""
    rc, data = _launch(tmp_path, monkeypatch, capsys, "-p", "multi", "-N", "2", "--runtime", "none",
                       "-o", "logs/%x-%N.out", "--", "sh", "-c", 'echo "worker on $(hostname)"')
    assert rc == 0, data
    logs = {path.name: path.read_text() for path in (tmp_path / "logs").iterdir()}
    assert logs["g-n1.out"].endswith("worker on n1\n") and logs["g-n2.out"] == "worker on n2\n", logs
    assert "worker on n2" not in logs["g-n1.out"]


def test_apulis_mindspore_script_gives_each_process_the_devices_it_set(tmp_path):
    """The Apulis launch script, run by bash as a worker runs it (the platform's DLWS_* variables; worker 1 of 2):
    each process gets ``--device_num=2`` read after the script set DEVICE_NUM (the platform's shell, which runs the
    Command first, would have read it empty), its own DEVICE_ID and RANK_ID, its own folder and its env.log."""
    from buildkit.launch.plan import LaunchRequest, plan_launch
    from buildkit.launch.schedulers.dlws import render_dlws
    from buildkit.site import load_site

    request = LaunchRequest(command=("python3", "-c", PRINT_ARGS, "--device_num=${DEVICE_NUM}", "id=$DEVICE_ID"),
                            image="apulistech/mindspore:0.3.0-withtools", framework="mindspore", nodes=2,
                            devices_per_node=2, rank_table="legacy", name="ms")
    ((_, text),) = render_dlws(plan_launch(load_site("apulis"), request)).files
    script = tmp_path / "launch-npu.sh"
    script.write_text(text)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DLWS_USER_NAME": "u", "DLWS_JOB_ID": "j7",
           "DLWS_NUM_WORKER": "2", "DLWS_ROLE_IDX": "1"}
    done = subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    assert lines == ["--device_num=2 id=0 rank=2 size=4", "--device_num=2 id=1 rank=3 size=4"], done.stdout
    for rank in (2, 3):
        assert "DEVICE_NUM=2" in (tmp_path / "ckit-runs" / "j7" / f"rank{rank}" / "env.log").read_text()


PRINT_ARGS = ("import os, sys; print(*sys.argv[1:], f\"rank={os.environ['RANK_ID']}\", "
              "f\"size={os.environ['RANK_SIZE']}\")")
