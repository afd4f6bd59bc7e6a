"""Ordinary Unix users for the tests that play co-tenants of a cluster (a victim and an attacker).

Made once with ``useradd`` (each with a home of its own and a group of its own), kept between runs: a user is
only a line in /etc/passwd. :func:`as_user` runs a command as one of them the way a login would (its uid, its
groups, its home), from the root test process.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path

NAMES = ("ckit-victim", "ckit-attacker")


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: Path

    def argv(self, *argv: str) -> list[str]:
        """``argv`` run as this user (``setpriv``: its uid, primary group and supplementary groups)."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups", *argv]

    def env(self, **more: str) -> dict[str, str]:
        """A login's environment: its home (and its config folder there, whatever the test process was given), its
        name, the test's PATH (ckit's venv is on it)."""
        return {"PATH": os.environ["PATH"], "HOME": str(self.home), "XDG_CONFIG_HOME": str(self.home / ".config"),
                "USER": self.name, "LOGNAME": self.name, "LANG": "C.UTF-8", **more}


def ensure(name: str) -> User:
    """The user ``name``, made when missing (``useradd --create-home --user-group``)."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--user-group", "--shell", "/bin/bash", name],  # noqa: S603,S607
                       check=True, capture_output=True, timeout=60)
        entry = pwd.getpwnam(name)
    home = Path(entry.pw_dir)
    if not home.is_dir():
        home.mkdir(mode=0o750, parents=True)
        os.chown(home, entry.pw_uid, entry.pw_gid)
    return User(name, entry.pw_uid, entry.pw_gid, home)


def as_user(user: User, argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 300,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(user.argv(*argv), env=env or user.env(), capture_output=True, text=True,  # noqa: S603
                          timeout=timeout, check=False, cwd=cwd or user.home)
