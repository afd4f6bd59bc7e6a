"""A Slurm 22.05 (munged, slurmctld, three slurmd) configured through SLURM_CONF in the run dir.

Config: linuxproc + task/none (no cgroups), cons_tres CR_Core, sched_interval=1.
Partitions: ``debug`` (default) and ``batch`` on this host's node (``vm``, 127.0.0.1), and ``multi`` on two
more nodes ``n1`` and ``n2``: each a slurmd in its own network namespace (a veth on the bridge ``ckitbr0``,
10.233.0.11/.12; the controller answers on 10.233.0.1), UTS namespace (``hostname`` is the node's name) and
mount namespace (its own /etc/hosts naming every node, and its own /tmp/ray, which a real node has on local
disk). So a two-node job has two hosts with two addresses: MASTER_ADDR, TF_CONFIG, Ray's head and workers and
srun's connections go between them as on a cluster. The bridge reaches nothing but these namespaces.
No SPANK plugin: Pyxis and enroot are not here (nothing built from source reaches the tests); their behaviour
is held by contract tests and checked on a real cluster by ``ckit doctor``.
"""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import time
from pathlib import Path

from .daemon import (
    Component,
    ComponentError,
    adopt,
    is_alive,
    log_tail,
    proc_comm,
    read_pid,
    run,
    socket_holder,
    stop_pid,
    wait_ready,
)

MUNGE_RUN = Path("/run/munge")
MUNGE_PIDFILE = MUNGE_RUN / "munged.pid"
MUNGE_SOCKET = MUNGE_RUN / "munge.socket.2"
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_LOG = Path("/var/log/munge/munged.log")
PARTITIONS = ("debug", "batch", "multi")
BRIDGE, BRIDGE_NET = "ckitbr0", "10.233.0"
NODES = {"n1": f"{BRIDGE_NET}.11", "n2": f"{BRIDGE_NET}.12"}  # the namespaced nodes of partition multi
# Folders a real node has on local disk, private to each namespaced node (a bind mount of its own folder):
# Slurm's TmpFS (PMIx puts its per-step folders there) and Ray's session folder.
NODE_TMP, RAY_TMP = "/tmp/ckit-slurm-node", "/tmp/ray"
_BROKEN = ("down", "drain", "fail", "unknown", "*", "not_responding")
_ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "")

SLURM_CONF = """\
ClusterName=ckit
SlurmctldHost={node}({BRIDGE_NET}.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MailProg=/bin/true
SlurmctldPidFile={home}/slurmctld.pid
SlurmdPidFile={home}/slurmd-%n.pid
StateSaveLocation={home}/state
SlurmdSpoolDir={home}/spool-%n
SlurmctldLogFile={home}/log/slurmctld.log
SlurmdLogFile={home}/log/slurmd-%n.log
SchedulerParameters=sched_interval=1
TmpFS={node_tmp}
KillWait=5
MinJobAge=60
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
NodeName=n1 NodeAddr={BRIDGE_NET}.11 CPUs={cpus} State=UNKNOWN
NodeName=n2 NodeAddr={BRIDGE_NET}.12 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
PartitionName=batch Nodes={node} Default=NO MaxTime=INFINITE State=UP
PartitionName=multi Nodes=n1,n2 Default=NO MaxTime=INFINITE State=UP
"""


class Munge(Component):
    """munged as the munge user, with the system key and socket (/run/munge): slurm's auth/munge needs it."""

    name = "munge"

    def pid(self) -> int | None:
        """Our munged: the one its pid file names, else the one holding our socket (never just any munged: a
        site's own munged with another socket is not ours to stop)."""
        pid = read_pid(MUNGE_PIDFILE)
        if pid is not None and is_alive(pid) and proc_comm(pid) == "munged":
            return pid
        return socket_holder(MUNGE_SOCKET, "munged")

    def running(self) -> bool:
        return self.pid() is not None

    def healthy(self) -> bool:
        if not self.running():
            return False
        try:
            cred = run(["munge", "-n"], timeout=10).stdout
            run(["unmunge"], input=cred, timeout=10)
        except ComponentError:
            return False
        return True

    def _start(self) -> None:
        munge = pwd.getpwnam("munge")
        MUNGE_RUN.mkdir(mode=0o755, exist_ok=True)
        os.chown(MUNGE_RUN, munge.pw_uid, munge.pw_gid)
        if not MUNGE_KEY.is_file():
            run(["runuser", "-u", "munge", "--", "mungekey", "--create", "--keyfile", str(MUNGE_KEY)])
        # As root munged exits: "PRNG seed dir is insecure: invalid ownership of /var/lib/munge".
        run(["runuser", "-u", "munge", "--", "munged"])
        wait_ready("munged", self.healthy, log=MUNGE_LOG, timeout=15)

    def _stop(self) -> None:
        stop_pid(self.pid(), what="munged")
        MUNGE_PIDFILE.unlink(missing_ok=True)


def _ip(*args: str, check: bool = True) -> None:
    if check:
        run(["ip", *args], timeout=30)
    else:  # removing what may not be there
        subprocess.run(["ip", *args], capture_output=True, timeout=30, check=False)


class Slurm(Component):
    """slurmctld + a slurmd for this host and one per namespaced node; clients need only SLURM_CONF (``env``)."""

    name = "slurm"
    requires = ("munge",)

    @property
    def home(self) -> Path:
        return self.run / "slurm"

    @property
    def conf(self) -> Path:
        return self.home / "slurm.conf"

    @property
    def nodename(self) -> str:
        return socket.gethostname().split(".")[0]

    @property
    def cpus(self) -> int:
        return len(os.sched_getaffinity(0))

    @property
    def workdir(self) -> Path:
        return self.home / "jobs"

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.nodename, *NODES)

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def _slurmd(self, node: str) -> int | None:
        return adopt(self.home / f"slurmd-{node}.pid", "slurmd", str(self.conf), f"-N\0{node}\0")

    def _ctld(self) -> int | None:
        return adopt(self.home / "slurmctld.pid", "slurmctld", str(self.conf))

    def node_state(self, node: str | None = None) -> str:
        try:
            out = run(["sinfo", "-h", "-n", node or self.nodename, "-o", "%T"], env=self.env(), timeout=10).stdout
        except ComponentError:
            return ""
        return out.decode().strip()

    def running(self) -> bool:
        return self.conf.is_file() and is_alive(self._ctld()) and all(is_alive(self._slurmd(n)) for n in self.nodes)

    def healthy(self) -> bool:
        if not self.running() or (self.home / "plugstack.conf").exists():  # a cluster of an earlier layout
            return False
        for node in self.nodes:  # idle, mixed, allocated, completing… are all fine for reuse
            state = self.node_state(node)
            if not state or any(bad in state for bad in _BROKEN):
                return False
        return True

    def write_config(self) -> None:
        for sub in ("state", "log", "jobs", "nodes"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(SLURM_CONF.format(node=self.nodename, home=self.home, cpus=self.cpus,
                                               BRIDGE_NET=BRIDGE_NET, node_tmp=NODE_TMP))
        Path(NODE_TMP).mkdir(exist_ok=True)
        hosts = ["127.0.0.1 localhost", f"{BRIDGE_NET}.1 {self.nodename}"]
        hosts += [f"{addr} {node}" for node, addr in NODES.items()]
        (self.home / "nodes" / "hosts").write_text("\n".join(hosts) + "\n")
        (self.home / "plugstack.conf").unlink(missing_ok=True)
        for node in self.nodes:
            (self.home / "nodes" / node).mkdir(exist_ok=True)

    def _network(self) -> None:
        """The bridge and, per node, a network namespace with a veth on it (idempotent)."""
        if not Path(f"/sys/class/net/{BRIDGE}").exists():
            _ip("link", "add", BRIDGE, "type", "bridge")
            _ip("addr", "add", f"{BRIDGE_NET}.1/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for node, addr in NODES.items():
            ns, host_end, node_end = f"ckit-{node}", f"ckit-{node}-h", f"ckit-{node}-c"
            if Path(f"/var/run/netns/{ns}").exists() and Path(f"/sys/class/net/{host_end}").exists():
                continue
            # a half-left pair (a job process kept the old namespace alive past the stop): start both ends afresh
            _ip("netns", "del", ns, check=False)
            _ip("link", "del", host_end, check=False)
            _ip("netns", "add", ns)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
            _ip("link", "set", node_end, "netns", ns)
            _ip("link", "set", host_end, "master", BRIDGE, "up")
            for args in (("addr", "add", f"{addr}/24", "dev", node_end), ("link", "set", node_end, "up"),
                         ("link", "set", "lo", "up")):
                _ip("netns", "exec", ns, "ip", *args)

    def _start_slurmd(self, node: str) -> None:
        argv = ["slurmd", "-f", str(self.conf), "-N", node]
        binds: list[str] = []
        # this host's node sees later mounts of the host (slave), the namespaced nodes only their own
        wrap = ["unshare", "--mount", "--propagation", "slave"]
        if node in NODES:
            binds.append(f"mount --bind {self.home / 'nodes' / 'hosts'} /etc/hosts")
            for shared in (NODE_TMP, RAY_TMP):
                private = self.home / "nodes" / node / Path(shared).name
                private.mkdir(parents=True, exist_ok=True)
                private.chmod(0o1777)  # as a node's /tmp: every user's jobs write there (unprivileged Ray, PMIx)
                Path(shared).mkdir(exist_ok=True)
                binds.append(f"mount --bind {private} {shared}")
            # a node's own /dev/shm, as on a real node: ch-run --join names its semaphore after the step, so two
            # nodes sharing one /dev/shm joined one group of four and a rank failed ("join: no PID 0")
            binds.append("mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm")
            binds.insert(0, f"hostname {node}")
            # nsenter, not `ip netns exec`, which remounts /sys without the cgroup tree slurmd reads
            wrap = ["nsenter", f"--net=/var/run/netns/ckit-{node}", "unshare", "--uts", "--mount", "--propagation",
                    "private"]
        argv = [*wrap, "sh", "-c", "".join(f"{b} && " for b in binds) + 'exec "$@"', "slurmd-node", *argv]
        log = self.home / "log" / f"slurmd-{node}.log"
        try:
            run(argv, env=self.env(), timeout=30)
        except ComponentError as err:
            raise ComponentError(f"{err}\nlog {log}:\n{log_tail(log)}") from None

    def _start(self) -> None:
        self.write_config()
        self._network()
        log = self.home / "log" / "slurmctld.log"
        try:
            run(["slurmctld", "-f", str(self.conf)], env=self.env(), timeout=30)
        except ComponentError as err:
            raise ComponentError(f"{err}\nlog {log}:\n{log_tail(log)}") from None
        for node in self.nodes:
            self._start_slurmd(node)
        for node in self.nodes:
            wait_ready(f"slurm node {node} idle", lambda n=node: self.node_state(n) == "idle",
                       log=self.home / "log" / f"slurmd-{node}.log", timeout=30)
        # The controller's first scheduling pass comes ~3 s after start: wait for a probe batch job, so the
        # first `sbatch --wait` of a test takes ~2 s instead of ~10 s (sbatch's polling backs off).
        self.wait_for_batch_job(
            self.submit(["--job-name=ckit-infra-ready", "--output=/dev/null", "--wrap=true"])
        )
    def submit(self, args: list[str]) -> str:
        """``sbatch --parsable ARGS`` in the job dir; returns the job id."""
        out = run(
            ["sbatch", "--parsable", f"--chdir={self.workdir}", *args], env=self.env(), timeout=30
        ).stdout
        return out.decode().strip().split(";")[0]

    def job_state(self, job_id: str) -> str:
        out = run(
            ["scontrol", "show", "job", "--oneliner", job_id], env=self.env(), timeout=10
        ).stdout.decode()
        return next((f.split("=", 1)[1] for f in out.split() if f.startswith("JobState=")), "")

    def wait_for_batch_job(self, job_id: str, timeout: float = 60) -> None:
        log = self.home / "log" / "slurmctld.log"
        wait_ready(
            f"slurm probe job {job_id}",
            lambda: self.job_state(job_id) not in _ACTIVE,
            log=log,
            timeout=timeout,
        )
        state = self.job_state(job_id)
        if state != "COMPLETED":
            raise ComponentError(f"slurm probe job {job_id} ended {state}; log {log}:\n{log_tail(log)}")

    def _drain(self, timeout: float = 120) -> None:
        """Running jobs (another test session's) end first: a restart would fail them. Bounded: a job that
        hangs does not keep a broken cluster from being started again."""
        deadline = time.monotonic() + timeout
        while is_alive(self._ctld()) and time.monotonic() < deadline:
            try:
                out = run(["squeue", "-h", "-t", "R,CG", "-o", "%i"], env=self.env(), timeout=10).stdout
            except ComponentError:
                return
            if not out.strip():
                return
            time.sleep(1)

    def _stop(self) -> None:
        self._drain()
        # slurmd.pid: the single-node layout before the namespaced nodes
        old = adopt(self.home / "slurmd.pid", "slurmd", str(self.conf))
        for pid, what in [(old, "slurmd"), *((self._slurmd(n), f"slurmd {n}") for n in self.nodes),
                          (self._ctld(), "slurmctld")]:
            stop_pid(pid, what=what)
        for pidfile in ("slurmd.pid", "slurmctld.pid", *(f"slurmd-{n}.pid" for n in self.nodes)):
            (self.home / pidfile).unlink(missing_ok=True)
        for node in NODES:
            _ip("netns", "del", f"ckit-{node}", check=False)
        _ip("link", "del", BRIDGE, check=False)
