"""A single-node Slurm 22.05 (munged, slurmctld, slurmd) configured through SLURM_CONF in the run dir.

Config: linuxproc + task/none (no cgroups), cons_tres CR_Core, sched_interval=1.
Partitions: ``debug`` (default) and ``batch``, both on the one node.
"""

from __future__ import annotations

import os
import pwd
import socket
from pathlib import Path

from .daemon import Component, ComponentError, adopt, is_alive, log_tail, run, stop_pid, wait_ready

MUNGE_RUN = Path("/run/munge")
MUNGE_PIDFILE = MUNGE_RUN / "munged.pid"
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_LOG = Path("/var/log/munge/munged.log")
PARTITIONS = ("debug", "batch")
_BROKEN = ("down", "drain", "fail", "unknown", "*", "not_responding")
_ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "")

SLURM_CONF = """\
ClusterName=ckit
SlurmctldHost={node}(127.0.0.1)
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
SlurmdPidFile={home}/slurmd.pid
StateSaveLocation={home}/state
SlurmdSpoolDir={home}/spool
SlurmctldLogFile={home}/log/slurmctld.log
SlurmdLogFile={home}/log/slurmd.log
SchedulerParameters=sched_interval=1
KillWait=5
MinJobAge=60
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=batch Nodes=ALL Default=NO MaxTime=INFINITE State=UP
"""


class Munge(Component):
    """munged as the munge user, with the system key and socket (/run/munge): slurm's auth/munge needs it."""

    name = "munge"

    def running(self) -> bool:
        return adopt(MUNGE_PIDFILE, "munged") is not None

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
        stop_pid(adopt(MUNGE_PIDFILE, "munged"), what="munged")
        MUNGE_PIDFILE.unlink(missing_ok=True)


class Slurm(Component):
    """slurmctld + slurmd for this host; clients need only SLURM_CONF (see ``env``)."""

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

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def _pids(self) -> tuple[int | None, int | None]:
        conf = str(self.conf)
        return adopt(self.home / "slurmctld.pid", "slurmctld", conf), adopt(
            self.home / "slurmd.pid", "slurmd", conf
        )

    def node_state(self) -> str:
        try:
            out = run(["sinfo", "-h", "-n", self.nodename, "-o", "%T"], env=self.env(), timeout=10).stdout
        except ComponentError:
            return ""
        return out.decode().strip()

    def running(self) -> bool:
        ctld, slurmd = self._pids()
        return self.conf.is_file() and is_alive(ctld) and is_alive(slurmd)

    def healthy(self) -> bool:
        if not self.running():
            return False
        state = self.node_state()  # idle, mixed, allocated, completing… are all fine for reuse
        return bool(state) and not any(bad in state for bad in _BROKEN)

    def write_config(self) -> None:
        for sub in ("state", "spool", "log", "jobs"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(SLURM_CONF.format(node=self.nodename, home=self.home, cpus=self.cpus))

    def _start(self) -> None:
        self.write_config()
        for daemon in ("slurmctld", "slurmd"):
            log = self.home / "log" / f"{daemon}.log"
            try:
                run([daemon, "-f", str(self.conf)], env=self.env(), timeout=30)
            except ComponentError as err:
                raise ComponentError(f"{err}\nlog {log}:\n{log_tail(log)}") from None
        log = self.home / "log" / "slurmd.log"
        wait_ready(
            f"slurm node {self.nodename} idle", lambda: self.node_state() == "idle", log=log, timeout=30
        )
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

    def _stop(self) -> None:
        ctld, slurmd = self._pids()
        stop_pid(slurmd, what="slurmd")
        stop_pid(ctld, what="slurmctld")
        for pidfile in ("slurmd.pid", "slurmctld.pid"):
            (self.home / pidfile).unlink(missing_ok=True)
