"""Base images made locally (no public registry is reachable): busybox from busybox-static, Debian via mmdebstrap."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

from .daemon import Component, ComponentError, run
from .podman import PodmanService

BUSYBOX_REF = "localhost/busybox:1.36"
DEBIAN_REF = "localhost/debian:bookworm"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CACHE_DIR = Path(os.environ.get("CKIT_TEST_CACHE") or Path.home() / ".cache" / "ckit-test")
DEBIAN_MIRROR = os.environ.get("CKIT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
EPOCH = 1_700_000_000  # fixed mtime: the busybox tar is byte-identical on every machine with the same busybox

PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"


def busybox_tar(busybox: Path) -> bytes:
    """A minimal root filesystem: /bin/busybox plus a symlink per applet, passwd/group, /tmp, /root."""
    applets = run([str(busybox), "--list"]).stdout.decode().split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, kind: bytes, mode: int, data: bytes = b"", target: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime, info.size, info.linkname = kind, mode, EPOCH, len(data), target
            tar.addfile(info, io.BytesIO(data) if data else None)

        for d in ("bin", "etc", "root", "tmp", "home", "proc", "sys", "dev", "var"):
            add(d, tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755)
        add("bin/busybox", tarfile.REGTYPE, 0o755, busybox.read_bytes())
        for applet in sorted(set(applets) - {"busybox"}):
            add(f"bin/{applet}", tarfile.SYMTYPE, 0o777, target="busybox")
        add("etc/passwd", tarfile.REGTYPE, 0o644, PASSWD.encode())
        add("etc/group", tarfile.REGTYPE, 0o644, GROUP.encode())
    return buf.getvalue()


class _BaseImage(Component):
    """An image imported into the podman store from a root filesystem tar; healthy when the tag exists."""

    ref = ""
    cmd = ""
    requires = ("podman",)

    def _podman_env(self) -> dict[str, str]:
        return PodmanService(self.run).env()

    def healthy(self) -> bool:
        try:
            run(["podman", "image", "exists", self.ref], env=self._podman_env())
        except ComponentError:
            return False
        return True

    def _import(self, tar: Path) -> None:
        changes = ["--change", f'CMD ["{self.cmd}"]', "--change", f"ENV {DEFAULT_PATH}"]
        run(["podman", "import", *changes, str(tar), self.ref], env=self._podman_env())

    def _stop(self) -> None:
        """Images live in the podman store under the run dir: nothing runs, nothing to stop."""


class BusyboxImage(_BaseImage):
    name = "busybox"
    ref = BUSYBOX_REF
    cmd = "/bin/sh"

    def _start(self) -> None:
        busybox = Path("/bin/busybox")  # from busybox-static: no shared libraries needed in the image
        if not busybox.is_file():
            raise ComponentError("/bin/busybox missing: run `bash tests/infra/install.sh` (busybox-static)")
        tar = self.run / "images" / "busybox.tar"
        tar.parent.mkdir(parents=True, exist_ok=True)
        tar.write_bytes(busybox_tar(busybox))
        self._import(tar)


class DebianImage(_BaseImage):
    name = "debian"
    ref = DEBIAN_REF
    cmd = "/bin/bash"

    @property
    def tarball(self) -> Path:
        return CACHE_DIR / "debian-bookworm-minbase.tar"

    def _start(self) -> None:
        if not self.tarball.is_file():
            self.build_tarball()
        self._import(self.tarball)

    def build_tarball(self) -> None:
        """mmdebstrap minbase bookworm into the cache (temp file, then rename: never a partial tar)."""
        self.tarball.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.tarball.with_name(f".{self.tarball.name}.{os.getpid()}.{time.monotonic_ns()}.tar")
        try:
            run(
                [
                    "mmdebstrap",
                    "--variant=minbase",
                    "--mode=root",
                    "--quiet",
                    "bookworm",
                    str(tmp),
                    DEBIAN_MIRROR,
                ],
                timeout=900,
            )
            tmp.replace(self.tarball)
        finally:
            tmp.unlink(missing_ok=True)
