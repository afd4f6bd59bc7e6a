"""The docker engine: the docker SDK against ``DOCKER_HOST`` (Docker, or podman's Docker-compatible service).

The build runs through the low-level streaming API so that every log line reaches the caller as it comes.
The SDK does not raise when the daemon reports a failure inside the stream: an item with ``error`` or
``errorDetail`` is the failure, and it is turned into a :class:`BuildError` naming the step and the log tail.
"""

from __future__ import annotations

import io
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import docker
import docker.constants
import docker.errors
import docker.models.images
import docker.utils
import requests.exceptions

from ..errors import BuildError, ConfigError
from ..render.context import context_tar
from .base import (
    BUILD_KEY_LABEL,
    Availability,
    BuildEvent,
    BuildFailed,
    BuildListener,
    BuildRequest,
    BuiltImage,
    register,
    start_hint,
)

PROBE_TIMEOUT = 5
# podman/buildah: "STEP 2/4: RUN …"; the classic Docker builder: "Step 2/4 : RUN …"
STEP_RE = re.compile(r"^(?:STEP|Step) (\d+)/(\d+)\s?: ?(.*)$")


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
    tls = docker.utils.kwargs_from_env(environment=dict(env)).get("tls")  # DOCKER_TLS_VERIFY, DOCKER_CERT_PATH
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
            failures.append(f"{address}: {_short(err)}")
    raise ConfigError("cannot reach a Docker API engine (" + "; ".join(failures) + ")", hint=start_hint("docker"))


def server_name(headers: Mapping[str, str]) -> str:
    """``Server: Libpod/4.3.1 (linux)`` -> "podman 4.3.1"; ``Server: Docker/27.0.3 (linux)`` -> "docker 27.0.3"."""
    server = headers.get("Server", "")
    product, _, rest = server.partition("/")
    version = rest.split(" ", 1)[0] or "?"
    if product.lower() == "libpod" or headers.get("Libpod-Api-Version"):
        return f"podman {headers.get('Libpod-Api-Version') or version}"
    return f"{product.lower() or 'docker'} {version}"


def _short(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    for marker in ("Connection refused", "No such file or directory", "Permission denied"):
        if marker in str(err):
            return marker.lower()
    return text[:200]


@dataclass
class StreamResult:
    image_id: str | None
    log: list[str]


def follow_build_stream(items: Iterable[Mapping[str, Any]], listener: BuildListener) -> StreamResult:
    """Consume a decoded build stream: forward lines, track the step, and raise on an error item."""
    log: list[str] = []
    image_id: str | None = None
    step: tuple[int, int, str] | None = None
    for item in items:
        if "error" in item or "errorDetail" in item:
            detail = item.get("errorDetail") or {}
            message = (item.get("error") or detail.get("message") or "unknown error").strip()
            log.append(f"ERROR: {message}")
            raise build_failure(message, step, log)
        text = item.get("stream")
        if text is None and item.get("status"):
            text = " ".join(str(item[k]) for k in ("id", "status", "progress") if item.get(k)) + "\n"
        if isinstance(item.get("aux"), Mapping) and item["aux"].get("ID"):
            image_id = str(item["aux"]["ID"])
        if not text:
            continue
        for line in text.splitlines():
            log.append(line)
            match = STEP_RE.match(line.strip())
            if match:
                step = (int(match[1]), int(match[2]), " ".join(match[3].split()))
                listener(BuildEvent(line, step[0], step[1]))
            else:
                listener(BuildEvent(line))
    return StreamResult(image_id, log)


def build_failure(message: str, step: tuple[int, int, str] | None, log: list[str]) -> BuildFailed:
    return BuildFailed(message, step=f"step {step[0]}/{step[1]} ({step[2]})" if step else None, log=log)


@register
class DockerEngine:
    """Docker or podman through the Docker Engine API."""

    name: ClassVar[str] = "docker"
    context_format: ClassVar[str] = "docker"
    product: ClassVar[str] = "image"

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = env
        self._daemon: Daemon | None = None

    @property
    def daemon(self) -> Daemon:
        if self._daemon is None:
            self._daemon = connect(self._env)
        return self._daemon

    @property
    def client(self) -> docker.DockerClient:
        return self.daemon.client

    @property
    def address(self) -> str:
        return self.daemon.address

    def probe(self) -> Availability:
        try:
            daemon = self.daemon
        except ConfigError as err:
            return Availability(False, err.message)
        return Availability(True, f"{daemon.server} at {daemon.address}")

    def cached(self, request: BuildRequest) -> BuiltImage | None:
        image = self.image(request.tag)
        if image is None or image.labels.get(BUILD_KEY_LABEL) != request.key:
            return None
        return BuiltImage(self.name, request.tag, image.id, 0.0, True, size=image.attrs.get("Size"))

    def image(self, ref: str) -> docker.models.images.Image | None:
        """Image ``ref`` in the engine, or None when it does not have it."""
        try:
            return self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        except (docker.errors.APIError, requests.exceptions.RequestException) as err:
            raise BuildError(f"cannot inspect image {ref}: {_short(err)}") from err

    def build(self, request: BuildRequest, listener: BuildListener) -> BuiltImage:
        started = time.monotonic()
        try:
            stream: Iterator[Mapping[str, Any]] = self.client.api.build(
                fileobj=io.BytesIO(context_tar(list(request.context))), custom_context=True, tag=request.tag, decode=True,
                rm=True, forcerm=True, labels={**request.labels, BUILD_KEY_LABEL: request.key}, timeout=None)
            result = follow_build_stream(stream, listener)
        except docker.errors.APIError as err:
            raise BuildError(f"the engine refused the build of {request.tag}: {err.explanation or err}",
                             hint="check the Dockerfile and the engine's log") from err
        except requests.exceptions.ConnectionError as err:
            raise BuildError(f"lost the connection to the engine at {self.address} during the build: {_short(err)}",
                             hint=start_hint("docker")) from err
        image = self.image(request.tag)
        if image is None:
            raise build_failure(f"the engine reported success but has no image {request.tag}", None, result.log)
        return BuiltImage(self.name, request.tag, result.image_id or image.id, time.monotonic() - started, False,
                          "\n".join(result.log), size=image.attrs.get("Size"))
