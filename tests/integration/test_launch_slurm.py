"""ckit launch on the real local Slurm (site ``local``): submitted with sbatch --wait, outputs read per task."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from buildkit.cli import main
from buildkit.launch.frameworks.mindspore import legacy_rank_table_problems, rank_table_problems
from buildkit.launch.words import literal
from tests.testdata import all_reduce_2nodes

HOSTILE = "it's \"q\" $(touch pwned) `touch pwned2` ${HOME} * ?\nsecond line\\ & ; | >x"


def _launch(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
            name: str, *args: str) -> tuple[int, str, Path]:
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    rc = main(["launch", "--site", "local", "--name", name, "--script", f"{name}.sbatch", "--submit", "--wait",
               "--json", *args])
    out = capsys.readouterr().out
    job_id = json.loads(out)["job_id"]
    assert re.fullmatch(r"\d+", job_id)
    return rc, job_id, tmp_path / f"{name}-{job_id}.out"


def test_ddp_variables_per_task(slurm, tmp_path, capsys, monkeypatch):
    rc, job, out = _launch(tmp_path, capsys, monkeypatch, "ddp", "--framework", "ddp", "--tasks-per-node", "2", "--",
                           "sh", "-c", literal('echo "DDP $RANK $LOCAL_RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT"'))
    assert rc == 0
    lines = sorted(line.split() for line in out.read_text().splitlines() if line.startswith("DDP "))
    assert [line[1:4] for line in lines] == [["0", "0", "2"], ["1", "1", "2"]]
    assert {line[4] for line in lines} == {slurm.nodename}
    assert {line[5] for line in lines} == {str(15000 + int(job) % 15000)}


def test_tf_config_per_worker(slurm, tmp_path, capsys, monkeypatch):
    rc, job, out = _launch(tmp_path, capsys, monkeypatch, "tf", "--framework", "tf", "--tasks-per-node", "2", "--",
                           "sh", "-c", literal('echo "TF $TF_CONFIG"'))
    assert rc == 0
    configs = sorted((json.loads(line[3:]) for line in out.read_text().splitlines() if line.startswith("TF ")),
                     key=lambda c: c["task"]["index"])
    port = 15000 + int(job) % 15000
    workers = [f"{slurm.nodename}:{port}", f"{slurm.nodename}:{port + 1}"]
    assert configs == [{"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}} for i in (0, 1)]


def test_horovod_host_list_and_mpi_plugin(slurm, tmp_path, capsys, monkeypatch):
    rc, _, out = _launch(tmp_path, capsys, monkeypatch, "hvd", "--framework", "horovod", "--tasks-per-node", "2",
                         "--", "sh", "-c", literal('echo "HVD $CKIT_HOSTS $SLURM_PROCID $PMI_RANK"'))
    assert rc == 0
    script = (tmp_path / "hvd.sbatch").read_text()
    assert "srun --kill-on-bad-exit=1 --export=ALL --mpi=pmi2 sh -c" in script
    lines = sorted(line.split() for line in out.read_text().splitlines() if line.startswith("HVD "))
    assert lines == [["HVD", f"{slurm.nodename}:2", "0", "0"], ["HVD", f"{slurm.nodename}:2", "1", "1"]]


@pytest.mark.parametrize("devices", [4])
@pytest.mark.parametrize("fmt", ["v1", "legacy"])
def test_mindspore_rank_table_and_device_processes(slurm, tmp_path, capsys, monkeypatch, devices, fmt):
    hccn = tmp_path / "hccn.conf"
    hccn.write_text("".join(f"address_{i}=192.168.{i}.1\nnetmask_{i}=255.255.255.0\n" for i in range(devices)))
    rc, job, out = _launch(tmp_path, capsys, monkeypatch, "ms", "--framework", "mindspore",
                           "--devices-per-node", str(devices), "--rank-table", fmt, "--env", f"CKIT_HCCN_CONF={hccn}",
                           "--",
                           "sh", "-c", literal('echo "MS $RANK_ID $DEVICE_ID $RANK_SIZE $(basename "$PWD") $RANK_TABLE_FILE"'))
    assert rc == 0
    table_path = tmp_path / f"ckit-{job}" / "rank_table.json"
    table = json.loads(table_path.read_text())
    if fmt == "v1":
        assert rank_table_problems(table, servers=1, devices=devices) == []
        ips = [d["device_ip"] for d in table["server_list"][0]["device"]]
    else:
        assert legacy_rank_table_problems(table, servers=1, devices=devices) == []
        ips = [i["devices"][0]["device_ip"] for i in table["group_list"][0]["instance_list"]]
    assert ips == [f"192.168.{i}.1" for i in range(devices)]
    lines = sorted(line.split()[1:] for line in out.read_text().splitlines() if line.startswith("MS "))
    assert lines == [[str(i), str(i), str(devices), f"rank{i}", str(table_path)] for i in range(devices)]


def test_exit_code_comes_back_through_wait(slurm, tmp_path, capsys, monkeypatch):
    rc, _, _ = _launch(tmp_path, capsys, monkeypatch, "fail", "--", "sh", "-c", "exit 3")
    assert rc == 3


def test_hostile_values_reach_the_program_verbatim(slurm, tmp_path, capsys, monkeypatch):
    rc, _, out = _launch(tmp_path, capsys, monkeypatch, "hostile", "--tasks-per-node", "1",
                         "--env", f"HOSTILE={literal(HOSTILE)}", "--",
                         "python3", "-c", "import json, os, sys; print('ARGS' + json.dumps([os.environ['HOSTILE'], *sys.argv[1:]]))",
                         literal(HOSTILE), "*")
    assert rc == 0
    line = next(line for line in out.read_text().splitlines() if line.startswith("ARGS"))
    assert json.loads(line[4:]) == [HOSTILE, HOSTILE, "*"]
    assert not list(tmp_path.glob("pwned*")) and not (tmp_path / "x").exists()


def test_podman_runtime_runs_inside_the_image(slurm, podman, busybox_image, tmp_path, capsys, monkeypatch):
    data = tmp_path / "we ird $(touch pwned) 'q' `touch pwned2` * ?"
    data.mkdir()
    (data / "f").write_text("from the host\n")
    rc, _, out = _launch(tmp_path, capsys, monkeypatch, "pod", "--runtime", "podman", "--image", busybox_image,
                         "--framework", "ddp", "--tasks-per-node", "2", "--mount", f"{data}:/data:ro",
                         "--env", f"HOSTILE={literal(HOSTILE)}", "--",
                         "sh", "-c", literal('test -f /run/.containerenv && echo "POD $RANK $WORLD_SIZE $(busybox | head -n 1)"'
                                             ' && cat /data/f && printf "ENV<%s>\\n" "$HOSTILE"'))
    assert rc == 0
    text = out.read_text()
    lines = sorted(line for line in text.splitlines() if line.startswith("POD "))
    assert len(lines) == 2 and lines[0].startswith("POD 0 2 BusyBox") and lines[1].startswith("POD 1 2 BusyBox")
    assert text.count("from the host\n") == 2 and text.count(f"ENV<{HOSTILE}>") == 2
    assert not list(tmp_path.glob("pwned*"))


def test_hostile_image_path_and_mount_reach_singularity_verbatim(tmp_path):
    """No scheduler needed: run the rendered image export and the runtime words with bash, print them back."""
    from buildkit.launch.plan import LaunchRequest, plan_launch
    from buildkit.launch.runtimes import REGISTRY
    from buildkit.process import run
    from buildkit.site import load_site

    image = f"{tmp_path}/it's $(touch pwned) `touch pwned2` *.sif"
    mount = f"{tmp_path}/a $(touch pwned3) 'b':/data"
    plan = plan_launch(load_site("twnia2"), LaunchRequest(command=("x",), image=image, account="P", mounts=(mount,)))
    runtime = REGISTRY.get("singularity", "--runtime")
    words = runtime.task_words(plan, ())
    script = f"export CKIT_IMAGE={runtime.image_word(plan)}\nprintf '%s\\n' {' '.join(words[1:])}\n"
    printed = run(["bash", "-c", script], cwd=tmp_path).stdout.splitlines()
    assert printed == ["exec", "--nv", "--bind", mount, image]
    assert not list(tmp_path.glob("pwned*"))


def test_default_writes_and_submits_when_sbatch_exists(slurm, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["launch", "--site", "local", "--name", "plain", "--", "true"]) == 0
    job_id = capsys.readouterr().out.strip()
    assert re.fullmatch(r"\d+", job_id) and (tmp_path / "plain.sbatch").is_file()
    from buildkit.process import run

    state = run(["scontrol", "show", "job", job_id], check=False).stdout
    assert f"JobId={job_id} JobName=plain" in state


def test_nccl_tests_job_output_becomes_a_report(slurm, tmp_path, capsys, monkeypatch):
    """The job prints seed 002's all_reduce_perf output; --wait parses the job's .out file into the report."""
    table = tmp_path / "all_reduce_2nodes.txt"
    table.write_text(all_reduce_2nodes())
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    rc = main(["launch", "--site", "local", "--framework", "nccl-tests", "--name", "nccl", "--submit", "--wait",
               "--json", "--", "cat", str(table)])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and [(r["avg_busbw_gbps"], r["ranks"]) for r in data["nccl"]] == [(164.643, 16)]
    script = (tmp_path / "nccl.sbatch").read_text()
    assert "#SBATCH --ntasks-per-node=1" in script and "srun --kill-on-bad-exit=1 --export=ALL --mpi=pmi2 cat " in script
