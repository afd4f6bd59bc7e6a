"""The docker engine: the docker SDK against ``DOCKER_HOST`` (Docker, or podman's Docker-compatible service).

The build runs through the low-level streaming API so that every log line reaches the caller as it comes.
The SDK does not raise when the daemon reports a failure inside the stream: an item with ``error`` or
``errorDetail`` is the failure, and it is turned into a :class:`BuildError` naming the step and the log tail.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..daemon import START_HINT, Daemon, EngineAPIError, connect, short_error
from ..errors import BuildError, ConfigError
from ..render.context import ContextFile, context_tar
from ..render.dockerfile import add_labels
from .base import (
    BUILD_KEY_LABEL,
    Availability,
    BuildEvent,
    BuildFailed,
    BuildListener,
    BuildRequest,
    BuiltImage,
    ContextFormat,
    Product,
)

if TYPE_CHECKING:
    import docker

# podman/buildah: "STEP 2/4: RUN …"; the classic Docker builder: "Step 2/4 : RUN …"
STEP_RE = re.compile(r"^(?:STEP|Step) ([0-9]+)/([0-9]+)\s?: ?(.*)$")


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


class DockerEngine:
    """Docker or podman through the Docker Engine API."""

    name: ClassVar[str] = "docker"
    context_format: ClassVar[ContextFormat] = "docker"
    product: ClassVar[Product] = "image"
    keeps_layers: ClassVar[bool] = True

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = env
        self._daemon: Daemon | None = None

    @property
    def image_daemon(self) -> Daemon:
        return self.daemon

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
        if image is None or labels_of(image).get(BUILD_KEY_LABEL) != request.key:
            return None
        return BuiltImage(self.name, request.tag, image["Id"], 0.0, True, size=image.get("Size"), inspected=image)

    def image(self, ref: str) -> dict[str, Any] | None:
        """The engine's inspect document of image ``ref``, or None when it does not have it."""
        try:
            return self.daemon.inspect_image(ref)
        except (EngineAPIError, OSError) as err:
            raise BuildError(f"cannot inspect image {ref}: {short_error(err)}") from err

    def build(self, request: BuildRequest, listener: BuildListener) -> BuiltImage:
        started = time.monotonic()
        context, labels = labelled(request)
        body = context_tar(context)
        if not self.address.startswith("unix://") or docker_config(self._env or os.environ) is not None:
            result = self._sdk_build(body, request, labels, listener)
        else:  # the socket directly: the SDK's import would cost a build more than its first steps
            proxies = proxy_build_args(self._env or os.environ)
            params = {"t": request.tag, "rm": "1", "forcerm": "1", "nocache": "1" if request.no_cache else "0",
                      "pull": "1" if request.pull else "0", **({"labels": json.dumps(labels)} if labels else {}),
                      **({"buildargs": json.dumps(proxies)} if proxies else {})}
            try:
                result = follow_build_stream(self.daemon.build(body, params), listener)
            except EngineAPIError as err:
                raise refused(request, str(err)) from err
            except OSError as err:
                raise lost(self.address, err) from err
        image = self.image(request.tag)
        if image is None:
            raise build_failure(f"the engine reported success but has no image {request.tag}", None, result.log)
        return BuiltImage(self.name, request.tag, result.image_id or image["Id"], time.monotonic() - started, False,
                          "\n".join(result.log), size=image.get("Size"), inspected=image)


    def _sdk_build(self, body: bytes, request: BuildRequest, labels: dict[str, str],
                   listener: BuildListener) -> StreamResult:
        """The build through the docker SDK, which sends the docker config's credentials with it."""
        import docker.errors
        import requests.exceptions

        try:
            stream: Iterator[Mapping[str, Any]] = self.client.api.build(
                fileobj=io.BytesIO(body), custom_context=True, tag=request.tag, decode=True, rm=True, forcerm=True,
                labels=labels, timeout=None, nocache=request.no_cache, pull=request.pull,
                buildargs=proxy_build_args(self._env or os.environ) or None)
            return follow_build_stream(stream, listener)
        except docker.errors.APIError as err:
            raise refused(request, str(err.explanation or err)) from err
        except requests.exceptions.ConnectionError as err:
            raise lost(self.address, err) from err


# Docker's predefined build args: every RUN step sees them without an ARG line, and docker history leaves them out
PROXY_VARIABLES = tuple(name for base in ("HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY")
                        for name in (base, base.lower()))


def proxy_build_args(env: Mapping[str, str]) -> dict[str, str]:
    """The proxy variables of the user's environment, as build args: the engine's daemon does not hand its own
    environment to RUN steps (the docker CLI sends these from its config; the API build has no CLI)."""
    return {name: env[name] for name in PROXY_VARIABLES if env.get(name)}


def refused(request: BuildRequest, why: str) -> BuildError:
    return BuildError(f"the engine refused the build of {request.tag}: {why}",
                      hint="check the Dockerfile and the engine's log")


def lost(address: str, err: BaseException) -> BuildError:
    return BuildError(f"lost the connection to the engine at {address} during the build: {short_error(err)}",
                      hint=START_HINT)


def docker_config(env: Mapping[str, str]) -> Path | None:
    """The docker config file whose credentials the docker SDK would send with a build (None: there is none)."""
    home = Path(env.get("HOME") or Path.home())
    places = [home / ".docker" / "config.json", home / ".dockercfg"]  # where the SDK looks, in its order
    if env.get("DOCKER_CONFIG"):
        places.insert(0, Path(env["DOCKER_CONFIG"]) / "config.json")
    return next((path for path in places if path.exists()), None)


def labelled(request: BuildRequest) -> tuple[list[ContextFile], dict[str, str]]:
    """The context to send and the labels to pass beside it: the request's labels and its build key go into the
    Dockerfile's closing LABEL when it has one (one step; podman makes each label passed beside it a step of its
    own, run again on every edit), else beside it."""
    labels = {**request.labels, BUILD_KEY_LABEL: request.key}
    context = list(request.context)
    for n, item in enumerate(context):
        if item.path == "Dockerfile":
            text = add_labels(item.data.decode(), labels)
            if text is not None:
                context[n] = replace(item, data=text.encode())
                return context, {}
    return context, labels


def labels_of(image: Mapping[str, Any]) -> Mapping[str, str]:
    """The labels of an inspected image (``Config.Labels``; null when it has none)."""
    config = image.get("Config")
    labels = config.get("Labels") if isinstance(config, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


ENGINES = (DockerEngine,)  # found by name (:mod:`.select`)
