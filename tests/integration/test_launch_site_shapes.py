"""Each remote site's scripts against a real Slurm controller shaped like that site (``sbatch --test-only``), and
an nccl-tests job run there for real on oci's 8-GPU nodes.

Per site, a slurmctld and one slurmd per node run with the site's partitions: CPUs, GPUs (GRES with device
files), memory and walltime limits from the profile (``SlurmdParameters=config_overrides`` lets this small
machine register as the site's nodes; ``EnforcePartLimits=ALL`` makes limits reject at submission).
Everything runs on 127.0.0.1 with free ports and is stopped by pid at the end.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildkit.errors import PolicyError
from buildkit.launch.plan import LaunchRequest, plan_launch
from buildkit.launch.schedulers.slurm import render_sbatch
from buildkit.process import run
from buildkit.site import load_site
from buildkit.site.model import Site
from tests.unit.launch_cases import FRAMEWORKS_BY_SITE, SEED_REQUESTS, default_request

NODES_PER_PARTITION = 2
SITES = ("twnia2", "neuron", "oci", "tara")


def _free_ports(count: int) -> list[int]:
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        socks.append(sock)
    ports = [s.getsockname()[1] for s in socks]
    for sock in socks:
        sock.close()
    return ports


def _partitions_used(site: Site) -> list[str]:
    used = {site.default_partition}
    used.update(r.partition for s, r in SEED_REQUESTS.values() if s == site.name and r.partition)
    return sorted(p for p in used if p)


def shaped_conf(site: Site, home: Path, ports: list[int]) -> tuple[str, str, list[str]]:
    """slurm.conf and gres.conf for ``site`` and the node names (two per partition used by the tests)."""
    lines = [f"ClusterName={site.name.replace('-', '')}", "SlurmctldHost=localhost(127.0.0.1)",
             f"SlurmctldPort={ports[0]}", "SlurmUser=root", "AuthType=auth/munge", "CredType=cred/munge",
             "MpiDefault=none", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
             "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
             "SwitchType=switch/none", "SchedulerType=sched/backfill", "SelectType=select/cons_tres",
             "SelectTypeParameters=CR_Core", "GresTypes=gpu", "EnforcePartLimits=ALL",
             "SlurmdParameters=config_overrides", "ReturnToService=2", "MailProg=/bin/true",
             f"SlurmctldPidFile={home}/slurmctld.pid", f"SlurmdPidFile={home}/slurmd-%n.pid",
             f"StateSaveLocation={home}/state", f"SlurmdSpoolDir={home}/spool-%n",
             f"SlurmctldLogFile={home}/slurmctld.log", f"SlurmdLogFile={home}/slurmd-%n.log"]
    gres, names, port = [], [], 1
    for index, name in enumerate(_partitions_used(site)):
        part = site.partition(name)
        assert part is not None
        nodes = [f"n{index}x{i}" for i in range(NODES_PER_PARTITION)]
        names += nodes
        for node in nodes:
            spec = f"NodeName={node} NodeAddr=127.0.0.1 Port={ports[port]} CPUs={part.cpus_per_node or 8}"
            spec += f" RealMemory={part.mem_per_node_mb or 4000}"
            if part.gpus_per_node:
                spec += f" Gres=gpu:{part.gpus_per_node}"
                devices = home / "dev" / node
                devices.mkdir(parents=True)
                for gpu in range(part.gpus_per_node):
                    (devices / f"nvidia{gpu}").touch()
                gres.append(f"NodeName={node} Name=gpu File={devices}/nvidia[0-{part.gpus_per_node - 1}]")
            lines.append(spec + " State=UNKNOWN")
            port += 1
        limit = f" MaxTime={part.max_time}" if part.max_time else ""
        default = " Default=YES" if name == site.default_partition else ""
        lines.append(f"PartitionName={name} Nodes={','.join(nodes)}{default}{limit} State=UP")
    return "\n".join(lines) + "\n", "\n".join(gres) + "\n", names


def _stop(pidfile: Path) -> None:
    if not pidfile.is_file():
        return
    pid = int(pidfile.read_text().strip())
    run(["kill", str(pid)], check=False)
    for _ in range(100):
        stat = Path(f"/proc/{pid}/stat")
        if not stat.exists() or stat.read_text().split()[2] in ("Z", "X"):
            return
        time.sleep(0.1)


@pytest.fixture(params=SITES)
def shaped(request, slurm) -> Iterator[tuple[Site, dict[str, str]]]:
    site = load_site(request.param)
    # a short folder of its own: slurmstepd's socket path in the spool folder must stay under 108 bytes, which a
    # test's tmp_path (deeper under xdist, or for a long user name) can pass
    home = Path(tempfile.mkdtemp(prefix="ckit-shape-", dir="/tmp"))
    (home / "state").mkdir()
    ports = _free_ports(1 + NODES_PER_PARTITION * len(_partitions_used(site)))
    conf, gres, nodes = shaped_conf(site, home, ports)
    (home / "slurm.conf").write_text(conf)
    (home / "gres.conf").write_text(gres)
    env = {"SLURM_CONF": str(home / "slurm.conf")}
    try:
        run(["slurmctld", "-f", env["SLURM_CONF"]], env=env, timeout=30)
        for node in nodes:
            run(["slurmd", "-f", env["SLURM_CONF"], "-N", node], env=env, timeout=30)
        deadline = time.monotonic() + 30
        while True:
            states = run(["sinfo", "-h", "-N", "-o", "%T"], env=env, check=False).stdout.split()
            if len(states) >= len(nodes) and set(states) == {"idle"}:
                break
            assert time.monotonic() < deadline, f"shaped {site.name} nodes not idle: {states}\n{conf}"
            time.sleep(0.3)
        yield site, env
    finally:
        for node in nodes:
            _stop(home / f"slurmd-{node}.pid")
        _stop(home / "slurmctld.pid")
        shutil.rmtree(home, ignore_errors=True)


def _test_only(script: str, env: dict[str, str], tmp_path: Path) -> tuple[int, str]:
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    result = run(["sbatch", "--test-only", str(path)], env=env, check=False, cwd=tmp_path)
    return result.returncode, result.stderr


def test_site_scripts_fit_the_site_partitions(shaped, tmp_path):
    site, env = shaped
    requests = [default_request(site.name, fw) for fw in FRAMEWORKS_BY_SITE[site.name]]
    requests += [r for s, r in SEED_REQUESTS.values() if s == site.name]
    for request in requests:
        plan = plan_launch(site, request)
        if plan.nodes > NODES_PER_PARTITION:
            continue
        rc, err = _test_only(render_sbatch(plan), env, tmp_path)
        assert rc == 0 and "to start at" in err, f"{site.name} {request.framework}: {err}"


def test_a_job_beyond_the_partition_is_rejected_by_slurm_too(shaped, tmp_path, monkeypatch):
    """ckit refuses more CPUs than a node has; with ckit's rules switched off, the shaped Slurm refuses it too."""
    from tests.unit.launch_cases import SITE_DEFAULTS

    site, env = shaped
    part = site.partition(None)
    assert part is not None
    fields = {k: v for k, v in SITE_DEFAULTS[site.name].items() if k != "image"}
    request = LaunchRequest(command=("x",), cpus_per_task=(part.cpus_per_node or 8) + 1, tasks_per_node=1,
                            runtime="none", **fields)  # type: ignore[arg-type]
    with pytest.raises(PolicyError):
        plan_launch(site, request)
    monkeypatch.setattr("buildkit.launch.rules.enforce", lambda plan: ())
    rc, err = _test_only(render_sbatch(plan_launch(site, request)), env, tmp_path)
    assert rc != 0 and "not available" in err


ALL_REDUCE_STAND_IN = """#!/bin/sh
# all_reduce_perf's stand-in (no GPU here): each process says how many GPUs it would drive and which it sees
g=1; while [ $# -gt 0 ]; do case "$1" in -g) g="$2"; shift 2 ;; *) shift ;; esac; done
echo "NCCL-PROC $SLURMD_NODENAME $SLURM_PROCID g=$g visible=$CUDA_VISIBLE_DEVICES"
"""


@pytest.mark.parametrize("shaped", ["oci"], indirect=True)
@pytest.mark.parametrize("tasks", [1, 8])
def test_nccl_tests_processes_share_the_nodes_gpus(shaped, tmp_path, tasks):
    """oci's 8 GPUs per node (GRES with device files): nccl-tests with one task per node drives -g 8, with eight
    tasks per node -g 1 each (it gave every task -g 8: 64 GPU slots on an 8-GPU node). The job runs for real on the
    shaped controller; all_reduce_perf is a stand-in that prints what it was given."""
    site, env = shaped
    stand_in = tmp_path / "all_reduce_perf"
    stand_in.write_text(ALL_REDUCE_STAND_IN)
    stand_in.chmod(0o755)
    plan = plan_launch(site, LaunchRequest(command=(), framework="nccl-tests", nodes=2, tasks_per_node=tasks,
                                           runtime="none", env=(("PATH", f"{tmp_path}:$PATH"),)))
    script = tmp_path / "nccl.sbatch"
    script.write_text(render_sbatch(plan))
    ran = run(["sbatch", "--wait", "--output", str(tmp_path / "out"), str(script)], env=env, cwd=tmp_path,
              check=False, timeout=120)
    text = (tmp_path / "out").read_text()
    assert ran.returncode == 0, ran.stderr + text
    procs = [line.split() for line in text.splitlines() if line.startswith("NCCL-PROC ")]
    assert len(procs) == 2 * tasks, text
    for node in {p[1] for p in procs}:
        assert sum(int(p[3].split("=")[1]) for p in procs if p[1] == node) == 8, text
