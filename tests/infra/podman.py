"""The podman API service (docker-compatible) with all config and storage under the run dir."""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path

from .daemon import Component, ComponentError, adopt, run, spawn, stop_pid, wait_ready

# Host nofile hard limit is 20000 and root lacks CAP_SYS_RESOURCE: podman's default ulimits make runc fail.
# crun refuses hybrid cgroups; there is no systemd.
# Staging (image_copy_tmp_dir, and the service's TMPDIR: build contexts, buildah's layer diffs) is a tmpfs: while a
# step of the framework test image committed its 1.8 GB layer, /var/tmp held 4.4 GB (the context, the diff, and
# containers/storage's own copy of the blob, which stays in /var/tmp: podman 4.3 has no setting for it), and the
# test machines have more memory than free disk.
STAGING_SIZE = "12g"
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "{tmp}"
image_copy_tmp_dir = "{staging}"

[network]
network_config_dir = "{cni}"
"""

STORAGE_CONF = """\
[storage]
driver = "overlay"
graphroot = "{graphroot}"
runroot = "{runroot}"
"""

REGISTRIES_CONF = """\
unqualified-search-registries = []

[[registry]]
location = "127.0.0.1:5000"
insecure = true

[[registry]]
location = "localhost:5000"
insecure = true

[[registry]]
location = "127.0.0.1:5001"
insecure = true

[[registry]]
location = "localhost:5001"
insecure = true

# The TLS registry: the API service cannot be given a cert dir without writing to /etc or $HOME, so it skips
# verification here; CLI tools verify with `--cert-dir RUN/registry/trust` (podman) / `--dest-cert-dir` (skopeo).
[[registry]]
location = "127.0.0.1:5002"
insecure = true

[[registry]]
location = "localhost:5002"
insecure = true
"""


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float = 5) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def unix_get(sock: Path, path: str) -> tuple[int, bytes]:
    conn = _UnixHTTPConnection(sock)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class PodmanService(Component):
    """``podman system service`` on ``unix://RUN/podman.sock`` (runc, cgroupfs, overlay, fixed ulimits)."""

    name = "podman"

    @property
    def home(self) -> Path:
        return self.run / "podman"

    @property
    def socket(self) -> Path:
        return self.run / "podman.sock"

    @property
    def pidfile(self) -> Path:
        return self.home / "service.pid"

    @property
    def log(self) -> Path:
        return self.home / "service.log"

    @property
    def staging(self) -> Path:
        return self.home / "staging"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    def env(self) -> dict[str, str]:
        return {
            "DOCKER_HOST": self.docker_host,
            "CONTAINERS_CONF": str(self.home / "containers.conf"),
            "CONTAINERS_REGISTRIES_CONF": str(self.home / "registries.conf"),
            "CONTAINERS_STORAGE_CONF": str(self.home / "storage.conf"),
            "REGISTRY_AUTH_FILE": str(self.home / "auth.json"),
        }

    def write_config(self) -> None:
        home = self.home
        for sub in ("tmp", "cni", "storage", "runroot"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        (home / "containers.conf").write_text(CONTAINERS_CONF.format(tmp=home / "tmp", cni=home / "cni",
                                                                     staging=self.staging))
        (home / "storage.conf").write_text(
            STORAGE_CONF.format(graphroot=home / "storage", runroot=home / "runroot")
        )
        (home / "registries.conf").write_text(REGISTRIES_CONF)
        auth = home / "auth.json"
        if not auth.is_file():
            auth.write_text("{}\n")

    def mount_staging(self) -> None:
        """A tmpfs for podman's staging, unless one is mounted there already (unmounted with the store)."""
        self.staging.mkdir(parents=True, exist_ok=True)
        if str(self.staging) not in mountpoints():
            run(["mount", "-t", "tmpfs", "-o", f"size={STAGING_SIZE},mode=1777", "tmpfs", str(self.staging)])

    def ping(self) -> bool:
        try:
            status, body = unix_get(self.socket, "/_ping")
        except OSError:
            return False
        return status == 200 and body.strip() == b"OK"

    def _pid(self) -> int | None:
        return adopt(self.pidfile, "podman", "system\0service", self.docker_host)

    def running(self) -> bool:
        return self._pid() is not None

    def healthy(self) -> bool:
        return self.running() and self.ping()

    def _start(self) -> None:
        self.write_config()
        self.mount_staging()
        self.socket.unlink(missing_ok=True)
        pid = spawn(
            ["podman", "system", "service", "--time=0", self.docker_host],
            log=self.log,
            env={**self.env(), "TMPDIR": str(self.staging)},
            pidfile=self.pidfile,
        )
        wait_ready("podman system service", self.ping, log=self.log, pid=pid, timeout=30)
        status, body = unix_get(self.socket, "/version")
        if status != 200 or "Version" not in json.loads(body):
            raise ComponentError(f"podman service answered /version with {status}: {body[:200]!r}")

    def _stop(self) -> None:
        stop_pid(self._pid(), what="podman system service")
        self.pidfile.unlink(missing_ok=True)
        self.socket.unlink(missing_ok=True)
        unmount_under(self.home)


def unmount_under(root: Path) -> None:
    """Unmount what podman left mounted in its store (overlay, shm), deepest first, so ``rm -rf RUN`` works."""
    prefix = f"{root}/"
    for mountpoint in sorted((m for m in mountpoints() if m.startswith(prefix)), key=len, reverse=True):
        run(["umount", "--lazy", mountpoint])


def mountpoints() -> list[str]:
    """Where something is mounted, as this process sees it."""
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
