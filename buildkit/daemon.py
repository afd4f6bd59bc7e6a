"""The Docker API daemon: Docker, or podman's Docker-compatible service (``DOCKER_HOST``), found and pinged.

Below the engines and the image sources: the docker engine builds through it, a ``docker-daemon:`` source saves
an image through it, and a push from an engine reads the image's ID through it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.constants
import docker.errors
import docker.utils
import requests.exceptions

from .errors import ConfigError

PROBE_TIMEOUT = 5
START_HINT = ("start Docker, or podman's Docker-compatible service: "
              "`podman system service --time=0 unix:///run/podman/podman.sock &` and "
              "`export DOCKER_HOST=unix:///run/podman/podman.sock`")


def fallback_sockets(env: Mapping[str, str]) -> list[str]:
    """Where to look for a daemon when DOCKER_HOST is unset: Docker's socket, then podman's (root, user)."""
    candidates = ["/var/run/docker.sock", "/run/podman/podman.sock"]
    if env.get("XDG_RUNTIME_DIR"):
        candidates.append(str(Path(env["XDG_RUNTIME_DIR"]) / "podman" / "podman.sock"))
    return [f"unix://{c}" for c in candidates]


@dataclass(frozen=True)
class Daemon:
    client: docker.DockerClient
    address: str
    server: str  # "podman 4.3.1", "docker 27.0.3"


def connect(env: Mapping[str, str] | None = None, timeout: int = PROBE_TIMEOUT) -> Daemon:
    """A client for the first daemon that answers ``/_ping``. ConfigError (exit 2) when none answers.

    The ping's headers give the API version and the server, so no slow ``/version`` call is made
    (podman's takes about a second).
    """
    env = os.environ if env is None else env
    tls = docker.utils.kwargs_from_env(environment=dict(env)).get("tls") or False  # DOCKER_TLS_VERIFY, DOCKER_CERT_PATH
    if env.get("DOCKER_HOST"):
        addresses = [env["DOCKER_HOST"]]
    else:
        addresses = [a for a in fallback_sockets(env) if Path(a.removeprefix("unix://")).exists()]
        addresses = addresses or ["unix:///var/run/docker.sock"]
    failures = []
    for address in addresses:
        try:
            probe = docker.APIClient(base_url=address, version=docker.constants.MINIMUM_DOCKER_API_VERSION,
                                     timeout=timeout, tls=tls)
            reply = probe.get(probe.base_url + "/_ping")
            reply.raise_for_status()
            headers = reply.headers
            client = docker.DockerClient(base_url=address, version=headers.get("Api-Version") or "1.41",
                                         timeout=timeout, tls=tls)
            return Daemon(client, address, server_name(headers))
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as err:
            failures.append(f"{address}: {short_error(err)}")
    raise ConfigError("cannot reach a Docker API engine (" + "; ".join(failures) + ")", hint=START_HINT)


def server_name(headers: Mapping[str, str]) -> str:
    """``Server: Libpod/4.3.1 (linux)`` -> "podman 4.3.1"; ``Server: Docker/27.0.3 (linux)`` -> "docker 27.0.3"."""
    server = headers.get("Server", "")
    product, _, rest = server.partition("/")
    version = rest.split(" ", 1)[0] or "?"
    if product.lower() == "libpod" or headers.get("Libpod-Api-Version"):
        return f"podman {headers.get('Libpod-Api-Version') or version}"
    return f"{product.lower() or 'docker'} {version}"


def short_error(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    for marker in ("Connection refused", "No such file or directory", "Permission denied"):
        if marker in str(err):
            return marker.lower()
    return text[:200]
