"""Enroot's registry credentials: ``$ENROOT_CONFIG_PATH/.credentials``, a netrc file.

``machine nvcr.io login $oauthtoken password KEY`` lines. As enroot does, a password that starts with ``$`` is
taken from the environment (``$NGC_API_KEY``, ``${NGC_API_KEY}``); command substitution (``$(…)``) is not run.
A ``USER@`` in the image URI picks that login's line; otherwise the first line for the registry host counts
(its name with or without the port; Docker Hub's lines may name ``auth.docker.io`` as enroot's docs show).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigError
from ..registry.distribution.auth import Credentials
from ..registry.distribution.reference import DOCKER_HUB

MAX_BYTES = 1 << 20
_VAR = re.compile(r"^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$")
DOCKER_HUB_MACHINES = (DOCKER_HUB, "registry-1.docker.io", "index.docker.io", "auth.docker.io")


def credentials_path(env: Mapping[str, str]) -> Path:
    """Where enroot reads credentials: ``$ENROOT_CONFIG_PATH/.credentials`` (default ``~/.config/enroot``)."""
    base = env.get("ENROOT_CONFIG_PATH")
    if not base:
        config_home = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
        base = str(Path(config_home) / "enroot")
    return Path(os.path.expanduser(base)) / ".credentials"


def entries(path: Path) -> list[tuple[str, str, str]]:
    """(machine, login, password) of each ``machine`` entry, in file order; [] when the file is absent."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from err
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_BYTES} bytes; not a credentials file")
    tokens = data.decode("utf-8", errors="replace").split()
    found, current = [], None
    i = 0
    while i < len(tokens):
        word = tokens[i]
        if word in ("machine", "default"):
            if current:
                found.append(current)
            current = {"machine": tokens[i + 1] if word == "machine" and i + 1 < len(tokens) else ""}
            i += 2 if word == "machine" else 1
            continue
        if current is not None and word in ("login", "password", "account") and i + 1 < len(tokens):
            current[word] = tokens[i + 1]
            i += 2
            continue
        i += 1
    if current:
        found.append(current)
    return [(e["machine"], e.get("login", ""), e.get("password", "")) for e in found if e["machine"]]


def _expand(password: str, path: Path, machine: str, env: Mapping[str, str]) -> str:
    if not password.startswith("$"):
        return password
    match = _VAR.match(password)
    if not match:
        raise ConfigError(f"{path}: the password of {machine} runs a command ({password[:12]}…), which ckit does "
                          "not do", hint="put the secret in an environment variable and write password $NAME")
    name = match.group(1) or match.group(2)
    value = env.get(name)
    if not value:
        raise ConfigError(f"{path}: the password of {machine} is ${name}, which is not set")
    return value


def lookup(registry: str, user: str | None, env: Mapping[str, str]) -> Credentials | None:
    """The credentials enroot would use for ``registry`` (and ``user``), or None."""
    path = credentials_path(env)
    names = {registry, registry.rsplit(":", 1)[0] if not registry.endswith("]") else registry}
    if registry in DOCKER_HUB_MACHINES:
        names.update(DOCKER_HUB_MACHINES)
    for machine, login, password in entries(path):
        if machine in names and (user is None or login == user):
            return Credentials(login, _expand(password, path, machine, env), source=str(path))
    if user is not None:
        raise ConfigError(f"no password for {user}@{registry} in {path}",
                          hint=f"add a line: machine {registry.rsplit(':', 1)[0]} login {user} password …")
    return None
