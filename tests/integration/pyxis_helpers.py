"""Run the importer as Pyxis does, against a registry whose token server grants repositories per user.

``AclTokenServer`` is the distribution token server of :mod:`tokenserver` with several users and an access list:
a scope on a repository that a user may not pull is granted with no actions, so the registry refuses the request
(as a real registry does for a private repository). Repositories under ``public/`` are pullable anonymously.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import tomllib
from pathlib import Path

from tests.infra.daemon import run_dir
from tests.infra.registry import Registry
from tests.integration.tokenserver import TokenServer


def console_script(name: str) -> str:
    """The console script ``name`` as pyproject.toml declares it, run against the tree these tests import: the
    venv's own script runs whichever tree was installed (another checkout, or one where the entry point was
    elsewhere). Written where every test user may run it; the environment it gets is still Pyxis's alone."""
    root = Path(__file__).resolve().parents[2]
    module, function = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"][name].split(":")
    folder = Path(tempfile.gettempdir()) / f"ckit-scripts-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}"
    folder.mkdir(mode=0o755, exist_ok=True)
    script = folder / name
    text = (f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(root)!r})\n"
            f"from {module} import {function}\nsys.exit({function}())\n")
    if not script.is_file() or script.read_text() != text:
        temp = folder / f".{name}.{os.getpid()}"
        temp.write_text(text)
        temp.chmod(0o755)
        temp.replace(script)  # whole, for a test run in parallel that runs it meanwhile
    return str(script)


IMPORTER = console_script("ckit-pyxis-importer")
USERS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
PRIVATE_READERS = {"alice", "carol"}  # who may pull from private/…


class AclTokenServer(TokenServer):
    def __init__(self, folder: Path) -> None:
        super().__init__(folder, "alice", USERS["alice"])
        self.caller = threading.local()

    def authorised(self, header: str) -> bool:
        self.caller.user = ""
        if not header:
            return True  # anonymous: only public repositories (see sign)
        if not header.startswith("Basic "):
            return False
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        self.caller.user = user
        return USERS.get(user) == password

    def sign(self, service: str, scopes: list[str]) -> str:
        user = getattr(self.caller, "user", "")
        allowed = []
        for scope in scopes:
            name = scope.split(":")[1] if scope.count(":") >= 2 else ""
            ok = (name.startswith("public/") and scope.endswith(":pull")) or \
                (user in PRIVATE_READERS and name.startswith("private/")) or (user == "alice")
            allowed.append(scope if ok else scope.rsplit(":", 1)[0] + ":")
        return super().sign(service, allowed)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class AclRegistry(Registry):
    """distribution with ``auth: token`` on a free port, trusting ``server`` (name and port of this process)."""

    def __init__(self, server: TokenServer, tag: str) -> None:
        super().__init__(run_dir())
        self.server = server
        self.name = f"registry-acl-{tag}-{os.getpid()}"
        self.port = free_port()

    def config(self) -> dict[str, object]:
        return {**super().config(), "auth": self.server.registry_auth()}

    def healthy(self) -> bool:  # always our own: the token server's key is new each time
        return False

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)


def pyxis_env(home: Path, cache: Path, *, user: str | None = None, job: int = 100, step: int = 0,
              extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment Pyxis gives an importer: enroot's paths (credentials netrc), Pyxis's and Slurm's variables.

    ``user`` has a line in ``$ENROOT_CONFIG_PATH/.credentials`` for 127.0.0.1 (the registry host without port)."""
    config = home / "enroot-config"
    config.mkdir(parents=True, exist_ok=True)
    if user is not None:
        (config / ".credentials").write_text(f"machine 127.0.0.1 login {user} password {USERS[user]}\n")
    importer_yaml = home / "importer.yaml"
    importer_yaml.write_text(f"cache: {cache}\n")
    env = {
        "PATH": os.environ["PATH"], "HOME": str(home), "USER": user or "nobody", "LANG": "C.UTF-8",
        "ENROOT_CONFIG_PATH": str(config), "ENROOT_CACHE_PATH": str(home / "enroot-cache"),
        "ENROOT_DATA_PATH": str(home / "enroot-data"), "ENROOT_RUNTIME_PATH": str(home / "enroot-run"),
        "PYXIS_RUNTIME_PATH": str(home / "pyxis"), "PYXIS_VERSION": "0.24.0",
        "SLURM_JOB_ID": str(job), "SLURM_STEP_ID": str(step), "SLURM_JOB_UID": str(os.getuid()),
        "SLURM_JOB_USER": user or "nobody", "SLURM_JOB_NAME": "pyxis-test",
        "CKIT_IMPORTER_CONFIG": str(importer_yaml),
    }
    return {**env, **(extra or {})}


def importer(*args: str, env: dict[str, str], as_uid: int | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``ckit-pyxis-importer ARGS`` exactly as Pyxis runs it: argv, this environment only, stdout captured apart."""
    argv = [IMPORTER, *args]
    if as_uid is not None:
        argv = ["setpriv", f"--reuid={as_uid}", f"--regid={as_uid}", "--clear-groups", *argv]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)  # noqa: S603


def spawn(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([IMPORTER, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # noqa: S603
                            text=True)


def unsquash_check(path: Path) -> str:
    """What ``enroot create`` runs on the file: ``unsquashfs -s`` (its check), then a listing of the tree."""
    for argv in (["unsquashfs", "-s", str(path)], ["unsquashfs", "-l", str(path)]):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
        assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout
