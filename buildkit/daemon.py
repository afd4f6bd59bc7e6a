"""The Docker API daemon: Docker, or podman's Docker-compatible service (``DOCKER_HOST``), found and pinged.

Below the engines and the image sources: the docker engine builds through it, a ``docker-daemon:`` source saves
an image through it, and a push from an engine reads the image's ID through it.

A local daemon (``unix://`` socket) is pinged, asked about images and given builds with the standard library's
HTTP client; the docker SDK, whose import alone costs about 0.15 s of CPU (``requests``, ``urllib3``), is loaded
only for what needs it: a save, a daemon behind TCP/TLS/SSH, or a build that must carry the credentials of a
docker config file (the SDK sends them for the base image's pull). So ``ckit build --to sqsh`` of a cached image
read from podman's storage never loads it, and a build on podman's socket neither.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from .errors import CkitError, ConfigError

if TYPE_CHECKING:
    import docker

PROBE_TIMEOUT = 5
MAX_REPLY = 16 << 20  # an image's inspect document (its history and config) stays far below; so does one item
# of a build's stream (a log line, an error)
DEFAULT_API = "1.41"  # when the ping does not say (podman 4 and Docker 20+ speak it)
START_HINT = ("start Docker, or podman's Docker-compatible service: "
              "`podman system service --time=0 unix:///run/podman/podman.sock &` and "
              "`export DOCKER_HOST=unix:///run/podman/podman.sock`")


class EngineAPIError(Exception):
    """The daemon answered a request with an error, or not in the form of the Docker Engine API."""


def fallback_sockets(env: Mapping[str, str]) -> list[str]:
    """Where to look for a daemon when DOCKER_HOST is unset: Docker's socket, then podman's (root, user)."""
    candidates = ["/var/run/docker.sock", "/run/podman/podman.sock"]
    if env.get("XDG_RUNTIME_DIR"):
        candidates.append(str(Path(env["XDG_RUNTIME_DIR"]) / "podman" / "podman.sock"))
    return [f"unix://{c}" for c in candidates]


@dataclass(frozen=True)
class Daemon:
    address: str
    server: str  # "podman 4.3.1", "docker 27.0.3"
    api_version: str = DEFAULT_API
    timeout: int = PROBE_TIMEOUT
    tls: Any = field(default=False, repr=False)  # the SDK's TLS settings (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH)

    @functools.cached_property
    def client(self) -> docker.DockerClient:
        """The docker SDK's client, made (and the SDK imported) on first use."""
        return self.sdk_client(self.timeout)

    def sdk_client(self, timeout: int) -> docker.DockerClient:
        import docker

        return docker.DockerClient(base_url=self.address, version=self.api_version, timeout=timeout, tls=self.tls)

    def inspect_image(self, ref: str) -> dict[str, Any] | None:
        """The engine's inspect document of image ``ref`` (``Id``, ``Config``, ``GraphDriver``, …), or None when
        it has no such image. Raises EngineAPIError (or OSError: the socket) when the engine fails."""
        if self.address.startswith("unix://"):
            status, _headers, body = _request(self.address, f"/v{self.api_version}/images/{quote(ref, safe='/:@')}/json",
                                              self.timeout)
            if status == 404:
                return None
            reply = _json_reply(status, body, f"inspect {ref}")
            if not isinstance(reply, dict) or not isinstance(reply.get("Id"), str):
                raise EngineAPIError(f"inspect {ref}: the engine's answer is not an image description")
            return reply
        return _sdk_inspect(self.client, ref)

    def build(self, context_tar: bytes, params: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        """``POST /build`` on a local daemon's socket: the items of its answer (one JSON object a line), as they
        come. EngineAPIError when it refuses the build or does not answer in the API's form; OSError when the
        socket fails. No deadline: a build takes as long as its steps."""
        conn = _UnixConnection(self.address.removeprefix("unix://"), None)
        try:
            conn.request("POST", f"/v{self.api_version}/build?{urlencode(params)}", body=context_tar,
                         headers={"Host": "docker", "Content-Type": "application/x-tar"})
            reply = conn.getresponse()
            if reply.status != 200:
                _json_reply(reply.status, reply.read(MAX_REPLY), "build")
            while line := reply.readline(MAX_REPLY + 1):
                yield _stream_item(line)
        except http.client.HTTPException as err:
            raise EngineAPIError(f"build: {type(err).__name__} {err}") from err
        finally:
            conn.close()


def _stream_item(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_REPLY:
        raise EngineAPIError(f"build: an item of the engine's answer exceeds {MAX_REPLY} bytes")
    try:
        item = json.loads(line) if line.strip() else {}
    except ValueError:
        item = None
    if not isinstance(item, dict):
        raise EngineAPIError(f"build: the engine's answer is not a stream of JSON objects: {line[:200]!r}")
    return item


def _sdk_inspect(client: docker.DockerClient, ref: str) -> dict[str, Any] | None:
    import docker.errors
    import requests.exceptions

    try:
        return dict(client.api.inspect_image(ref))  # type: ignore[no-untyped-call]  # untyped in the SDK
    except docker.errors.ImageNotFound:
        return None
    except (docker.errors.APIError, requests.exceptions.RequestException) as err:
        raise EngineAPIError(short_error(err)) from err


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _request(address: str, path: str, timeout: float) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One GET on a unix socket, its reply read up to :data:`MAX_REPLY` bytes within ``timeout`` per read."""
    conn = _UnixConnection(address.removeprefix("unix://"), timeout)
    try:
        conn.request("GET", path, headers={"Host": "docker"})
        reply = conn.getresponse()
        body = reply.read(MAX_REPLY + 1)
        if len(body) > MAX_REPLY:
            raise EngineAPIError(f"GET {path}: the engine's answer exceeds {MAX_REPLY} bytes")
        return reply.status, reply.headers, body
    except http.client.HTTPException as err:
        raise EngineAPIError(f"GET {path}: {type(err).__name__} {err}") from err
    finally:
        conn.close()


def _json_reply(status: int, body: bytes, what: str) -> Any:
    try:
        reply = json.loads(body)
    except ValueError:
        reply = None
    if status != 200:
        message = reply.get("message") if isinstance(reply, dict) else None
        text = str(message or body[:200].decode(errors="replace")).strip()
        raise EngineAPIError(f"{what}: HTTP {status}: {text or 'the engine gave no reason'}")
    if reply is None:
        raise EngineAPIError(f"{what}: the engine's answer is not JSON")
    return reply


def connect(env: Mapping[str, str] | None = None, timeout: int = PROBE_TIMEOUT) -> Daemon:
    """The first daemon that answers ``/_ping``. ConfigError (exit 2) when none answers.

    The ping's headers give the API version and the server, so no slow ``/version`` call is made
    (podman's takes about a second).
    """
    env = os.environ if env is None else env
    if env.get("DOCKER_HOST"):
        addresses = [env["DOCKER_HOST"]]
    else:
        addresses = [a for a in fallback_sockets(env) if Path(a.removeprefix("unix://")).exists()]
        addresses = addresses or ["unix:///var/run/docker.sock"]
    failures = []
    for address in addresses:
        try:
            headers = _ping_unix(address, timeout) if address.startswith("unix://") else None
            if headers is None:
                return _connect_sdk(address, env, timeout)
            return Daemon(address, server_name(headers), headers.get("Api-Version") or DEFAULT_API, timeout)
        except (EngineAPIError, OSError) as err:
            failures.append(f"{address}: {short_error(err)}")
    raise ConfigError("cannot reach a Docker API engine (" + "; ".join(failures) + ")", hint=START_HINT)


def _ping_unix(address: str, timeout: int) -> dict[str, str]:
    status, headers, _body = _request(address, "/_ping", timeout)
    if status != 200:
        raise EngineAPIError(f"/_ping: HTTP {status}")
    return {name.title(): value for name, value in headers.items()}  # HTTP names are case-insensitive


def _connect_sdk(address: str, env: Mapping[str, str], timeout: int) -> Daemon:
    """A daemon behind TCP (maybe TLS) or SSH: the SDK knows those transports."""
    import docker
    import docker.constants
    import docker.errors
    import docker.utils
    import requests.exceptions

    tls = docker.utils.kwargs_from_env(environment=dict(env)).get("tls") or False  # DOCKER_TLS_VERIFY, …
    try:
        probe = docker.APIClient(base_url=address, version=docker.constants.MINIMUM_DOCKER_API_VERSION,
                                 timeout=timeout, tls=tls)
        reply = probe.get(probe.base_url + "/_ping")
        reply.raise_for_status()
    except (docker.errors.DockerException, requests.exceptions.RequestException) as err:
        raise EngineAPIError(short_error(err)) from err
    headers = reply.headers
    return Daemon(address, server_name(headers), headers.get("Api-Version") or DEFAULT_API, timeout, tls)


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


def local_image(ref: str, text: str, unreachable: type[CkitError], daemon: Daemon | None = None) -> dict[str, Any]:
    """The engine's inspect document of the image ``ref`` (``text``: as the user wrote it); ``unreachable`` (the
    caller's error class) when the engine cannot be asked, ConfigError when it has no such image."""
    try:
        image = (daemon or connect()).inspect_image(ref)
    except (EngineAPIError, OSError) as err:
        raise unreachable(f"{text}: cannot reach the engine: {short_error(err)}",
                          hint="start Docker or `podman system service`, or set DOCKER_HOST") from err
    if image is None:
        raise ConfigError(f"{text}: no such image in the engine",
                          hint="check `docker images` / `podman images`, or build it first")
    return image
