"""Charliecloud for ``--runtime charliecloud`` jobs, as root and as an unprivileged user.

``ch-run`` (Debian 12's charliecloud-runtime 0.31, SquashFUSE built in) is installed by install.sh. This
component makes what an unprivileged user needs on a real node: the user itself (``ckit-user``, with a home),
a ``/dev/fuse`` it may open (mode 0666, as Debian's fuse3 udev rule sets it on a normal machine; a container
host may leave it 0600) and user namespaces, and a way through the run dir's parent folders (``o+x``), because
the user's jobs read Slurm's config there. Nothing runs: there is nothing to stop.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
from pathlib import Path

from .daemon import Component, ComponentError, run

USER = "ckit-user"
FUSE = Path("/dev/fuse")


def user_can_traverse(path: Path, uid: int, gids: set[int]) -> bool:
    st = path.stat()
    bits = stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid in gids else stat.S_IXOTH
    return bool(st.st_mode & bits)


class Charliecloud(Component):
    name = "charliecloud"

    @property
    def user(self) -> pwd.struct_passwd:
        return pwd.getpwnam(USER)

    def _closed_folders(self) -> list[Path]:
        """The run dir and its parents that the user cannot pass through."""
        entry = self.user
        return [p for p in (self.run, *self.run.parents)
                if not user_can_traverse(p, entry.pw_uid, {entry.pw_gid})]

    def healthy(self) -> bool:
        try:
            self.user  # noqa: B018 - raises KeyError when missing
        except KeyError:
            return False
        return (shutil.which("ch-run") is not None and FUSE.exists()
                and stat.S_IMODE(FUSE.stat().st_mode) & 0o006 == 0o006 and not self._closed_folders())

    def _start(self) -> None:
        if shutil.which("ch-run") is None:
            raise ComponentError("ch-run not found: run `bash tests/infra/install.sh` (charliecloud-runtime)")
        try:
            self.user  # noqa: B018
        except KeyError:
            run(["useradd", "--create-home", "--shell", "/bin/bash", "--comment", "ckit unprivileged tests", USER])
        if not FUSE.exists():
            raise ComponentError("/dev/fuse is missing: load the fuse module (modprobe fuse)")
        os.chmod(FUSE, 0o666)
        for folder in self._closed_folders():
            folder.chmod(stat.S_IMODE(folder.stat().st_mode) | stat.S_IXOTH)
            self.journal(f"o+x on {folder}: {USER}'s jobs read Slurm's config in the run dir")
        # user namespaces: ch-run needs them unprivileged (a hardened kernel may forbid them)
        run(["runuser", "-u", USER, "--", "unshare", "--user", "--map-root-user", "true"])

    def _stop(self) -> None:
        """A user and a device mode: nothing runs, nothing to stop."""
