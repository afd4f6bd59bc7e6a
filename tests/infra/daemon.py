"""Process control for test daemons: spawn detached, pid files, readiness waits, bounded stops.

PID 1 on the project's machines reaps orphans lazily, so a killed daemon can stay a zombie for a while and
``kill -0`` still succeeds: liveness is read from ``/proc/PID/stat`` instead.
"""

from __future__ import annotations

import abc
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
LOG_TAIL_LINES = 30
_children: dict[int, subprocess.Popen[bytes]] = {}


class ComponentError(RuntimeError):
    """A component failed to start or stop; the message carries the tail of its log."""


def run_dir() -> Path:
    """The run dir holding every config, socket, pid file, store and log (``CKIT_RUN_DIR``, absolute)."""
    path = Path(os.environ.get("CKIT_RUN_DIR") or REPO_ROOT / ".run").expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def proc_state(pid: int) -> str | None:
    """The state letter of ``pid`` from /proc/PID/stat (``R``, ``S``, ``Z``…), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rpartition(")")[2].split()[0]


def is_alive(pid: int | None) -> bool:
    if pid is None:
        return False
    _reap(pid)
    return proc_state(pid) not in (None, "Z", "X")


def read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def find_pid(comm: str, *needles: str) -> int | None:
    """A live process named ``comm`` whose command line holds every ``needle`` (to adopt a lost daemon)."""
    wanted = [n.encode() for n in needles]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name = (entry / "comm").read_text().strip()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if name == comm[:15] and all(n in cmdline for n in wanted) and is_alive(int(entry.name)):
            return int(entry.name)
    return None


def proc_comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def socket_holder(path: Path, comm: str) -> int | None:
    """The live process named ``comm`` that holds the unix socket bound at ``path`` (its listening end):
    /proc/net/unix names the socket's inode, the process's fd table has ``socket:[INODE]``."""
    try:
        table = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return None
    wanted = {f"socket:[{fields[6]}]" for fields in map(str.split, table) if len(fields) >= 8 and fields[7] == str(path)}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or proc_comm(int(entry.name)) != comm[:15]:
            continue
        try:
            links = {os.readlink(fd) for fd in (entry / "fd").iterdir()}
        except OSError:
            continue
        if links & wanted and is_alive(int(entry.name)):
            return int(entry.name)
    return None


def adopt(pidfile: Path, comm: str, *needles: str) -> int | None:
    """The live pid in ``pidfile``, else a process found by :func:`find_pid` (then recorded in ``pidfile``)."""
    pid = read_pid(pidfile)
    if is_alive(pid):
        return pid
    pid = find_pid(comm, *needles)
    if pid is not None:
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        pidfile.write_text(f"{pid}\n")
    return pid


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {log})"
    return "\n".join(text.splitlines()[-lines:]) or f"(empty log {log})"


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    pidfile: Path | None = None,
    drop_env_prefix: str | None = None,
) -> int:
    """Start ``argv`` in its own session with output to a fresh ``log``; record the pid in ``pidfile``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **(env or {})}
    if drop_env_prefix:
        full_env = {k: v for k, v in full_env.items() if not k.startswith(drop_env_prefix)}
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(  # noqa: S603 - argv list, never a shell
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=full_env,
                start_new_session=True,
            )
        except FileNotFoundError as err:
            raise ComponentError(f"{argv[0]} not found: run `bash tests/infra/install.sh`") from err
    _children[proc.pid] = proc
    if pidfile is not None:
        pidfile.write_text(f"{proc.pid}\n")
    return proc.pid


def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[bytes]:
    """Run a one-shot command; a non-zero exit raises ComponentError with its output tail."""
    full_env = {**os.environ, **(env or {})}
    try:
        proc = subprocess.run(  # noqa: S603 - argv list, never a shell
            list(argv), input=input, capture_output=True, env=full_env, timeout=timeout, check=False
        )
    except FileNotFoundError as err:
        raise ComponentError(f"{argv[0]} not found: run `bash tests/infra/install.sh`") from err
    except subprocess.TimeoutExpired as err:
        raise ComponentError(f"{' '.join(argv)} did not finish within {timeout:.0f} s") from err
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).decode(errors="replace").splitlines()[-LOG_TAIL_LINES:])
        raise ComponentError(f"{' '.join(argv)} exited {proc.returncode}:\n{tail}")
    return proc


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]


def wait_ready(
    what: str, ready: Callable[[], bool], *, log: Path, pid: int | None = None, timeout: float = 30
) -> float:
    """Poll ``ready`` until true; raise with the log tail on timeout or when ``pid`` dies. Returns seconds."""
    start = time.monotonic()
    delay = 0.02
    while True:
        if ready():
            return time.monotonic() - start
        if pid is not None and not is_alive(pid):
            raise ComponentError(f"{what} exited during start-up; log {log}:\n{log_tail(log)}")
        if time.monotonic() - start > timeout:
            raise ComponentError(f"{what} not ready after {timeout:.0f} s; log {log}:\n{log_tail(log)}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


def stop_pid(pid: int | None, *, what: str, timeout: float = 20) -> None:
    """SIGTERM ``pid``, wait until /proc shows it gone or a zombie, SIGKILL after ``timeout`` (bounded)."""
    if not is_alive(pid):
        return
    assert pid is not None
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not is_alive(pid):
                return
            time.sleep(0.05)
    raise ComponentError(f"{what} (pid {pid}) still running after SIGKILL")


@contextmanager
def locked(name: str) -> Iterator[None]:
    """An exclusive lock per component, so parallel test workers or scripts start it once."""
    lockdir = run_dir() / "locks"
    lockdir.mkdir(parents=True, exist_ok=True)
    with open(lockdir / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Component(abc.ABC):
    """A real component under the run dir: ``start`` reuses a healthy one, ``stop`` kills by pid file."""

    name = "component"
    requires: tuple[str, ...] = ()

    def __init__(self, run: Path | None = None) -> None:
        self.run = run or run_dir()
        self.start_seconds: float | None = None

    def env(self) -> dict[str, str]:
        """Variables a client needs to talk to this component (also written to RUN/env.sh)."""
        return {}

    @abc.abstractmethod
    def healthy(self) -> bool:
        """Running and answering (reused by ``start`` when true)."""

    @abc.abstractmethod
    def _start(self) -> None:
        """Start and wait until ready; raise ComponentError with the log tail on failure."""

    @abc.abstractmethod
    def _stop(self) -> None:
        """Stop by pid (bounded wait), remove sockets and pid files; a no-op when not running."""

    def start(self) -> bool:
        """Start unless a healthy one runs; True when this call started it."""
        with locked(self.name):
            return self._start_locked()

    def running(self) -> bool:
        """Its process exists (it may still be starting, or slow under load); images have none."""
        return False

    def _start_locked(self) -> bool:
        if self.healthy():
            return False
        if self.running():
            # Never kill a live daemon over one slow answer: other sessions may be using it.
            try:
                wait_ready(f"{self.name} (running)", self.healthy, log=self.run / "infra.log", timeout=20)
                return False
            except ComponentError:
                self.journal("unhealthy for 20 s: restarting")
        self._stop()
        begin = time.monotonic()
        self._start()
        self.start_seconds = time.monotonic() - begin
        self.journal(f"started in {self.start_seconds:.2f} s")
        return True

    def journal(self, event: str) -> None:
        """One line in RUN/infra.log: who started, reused or stopped what (shared by all sessions)."""
        stamp = time.strftime("%H:%M:%S")
        with open(self.run / "infra.log", "a") as log:
            log.write(f"{stamp} pid {os.getpid()} {self.name}: {event}\n")

    def stop(self, *, force: bool = False) -> list[int]:
        """Drop the keep marker and stop, unless other live processes hold leases (their pids are returned).

        ``force`` stops it whoever uses it.
        """
        with locked(self.name):
            self._keep_marker.unlink(missing_ok=True)
            users = [pid for pid in self._holders() if pid != os.getpid() and is_alive(pid)]
            if users and not force:
                return users
            for lease in self._lease_dir.glob("*"):
                lease.unlink(missing_ok=True)
            self._stop()
            self.journal("stopped (stop --force)" if users else "stopped (stop)")
            return []

    def _holders(self) -> list[int]:
        return [int(p.name) for p in self._lease_dir.glob("*") if p.name.isdigit()]

    # Several pytest sessions (several checkouts of one tree, xdist workers) share the components: each holds a
    # lease (its pid); the last one to leave stops the component, unless start.sh asked to keep it.
    @property
    def _lease_dir(self) -> Path:
        return self.run / "leases" / self.name

    @property
    def _keep_marker(self) -> Path:
        return self.run / "leases" / f"{self.name}.keep"

    def keep(self) -> None:
        """Leave it running when the last lease is released (``start.sh``)."""
        self._keep_marker.parent.mkdir(parents=True, exist_ok=True)
        self._keep_marker.touch()

    def acquire(self) -> bool:
        """Start (or reuse) and hold a lease for this process; True when this call started it."""
        with locked(self.name):
            started = self._start_locked()
            self._lease_dir.mkdir(parents=True, exist_ok=True)
            (self._lease_dir / str(os.getpid())).touch()
            return started

    def release(self) -> bool:
        """Drop this process's lease; stop when no live lease is left and nobody asked to keep it."""
        with locked(self.name):
            (self._lease_dir / str(os.getpid())).unlink(missing_ok=True)
            holders = self._holders()
            if any(is_alive(pid) for pid in holders) or self._keep_marker.exists():
                return False
            for pid in holders:
                (self._lease_dir / str(pid)).unlink(missing_ok=True)
            self._stop()
            self.journal("stopped (last lease released)")
            return True
