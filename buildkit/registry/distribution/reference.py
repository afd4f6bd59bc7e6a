"""Image references: ``[REGISTRY/]REPO[:TAG][@DIGEST]``, canonicalised like docker does.

A first path component with a ``.`` or ``:`` (or ``localhost``) is a registry host; otherwise the
reference is on Docker Hub (``docker.io``), where one-part names live under ``library/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import ConfigError

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
DEFAULT_TAG = "latest"

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST_RE = re.compile(r"^sha256:[a-f0-9]{64}$")
HOST_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                     r"|\[[0-9a-fA-F:]+\])(?::[0-9]+)?$")
_SCHEMES = ("docker://", "oras://")
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")


@dataclass(frozen=True)
class Reference:
    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def reference(self) -> str:
        """What goes into ``/v2/<repo>/manifests/<reference>``: the digest when pinned, else the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    @property
    def api_host(self) -> str:
        return api_host(self.registry)

    @property
    def is_loopback(self) -> bool:
        return is_loopback(self.registry)

    def with_digest(self, digest: str) -> Reference:
        return Reference(self.registry, self.repository, self.tag, digest)

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        if not self.tag and not self.digest:
            text += f":{DEFAULT_TAG}"
        return text


def api_host(registry: str) -> str:
    """The host that serves the registry API (Docker Hub's differs from its name)."""
    return DOCKER_HUB_API if registry == DOCKER_HUB else registry


def is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
    return name in LOOPBACK_HOSTS


def _looks_like_host(part: str) -> bool:
    return "." in part or ":" in part or part == "localhost" or part.startswith("[")


def parse(text: str) -> Reference:
    """Parse a reference; raise ConfigError (exit 2) naming what is wrong."""
    raw = text
    for scheme in _SCHEMES:
        if text.startswith(scheme):
            text = text[len(scheme):]
    if not text or any(c.isspace() for c in text):
        raise ConfigError(f"invalid image reference {raw!r}", hint="write REGISTRY/REPO:TAG, e.g. 127.0.0.1:5000/team/app:v1")
    digest = None
    if "@" in text:
        text, digest = text.split("@", 1)
        if not DIGEST_RE.fullmatch(digest):
            raise ConfigError(f"invalid digest in image reference {raw!r}", hint="a digest is sha256: and 64 hex digits")
    first, _, rest = text.partition("/")
    if rest and _looks_like_host(first):
        registry, path = first, rest
        if not HOST_RE.fullmatch(registry):
            raise ConfigError(f"invalid registry host {registry!r} in {raw!r}")
    else:
        registry, path = DOCKER_HUB, text
    tag = None
    last_slash = path.rfind("/")
    colon = path.rfind(":")
    if colon > last_slash:
        path, tag = path[:colon], path[colon + 1:]
        if not TAG_RE.fullmatch(tag):
            raise ConfigError(f"invalid tag {tag!r} in image reference {raw!r}",
                              hint="a tag is up to 128 letters, digits, '_', '.' or '-'")
    if registry == "index.docker.io":
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not REPOSITORY_RE.fullmatch(path):
        raise ConfigError(f"invalid repository name {path!r} in image reference {raw!r}",
                          hint="repository names are lowercase letters, digits and '.', '_', '-' separated by '/'")
    return Reference(registry, path, tag, digest)


def parse_registry(text: str) -> str:
    """A registry host as given to ``ckit login`` (scheme and trailing path stripped)."""
    host = text
    for prefix in ("https://", "http://"):
        if host.startswith(prefix):
            host = host[len(prefix):]
    host = host.split("/", 1)[0]
    if host in ("index.docker.io", "registry-1.docker.io"):
        host = DOCKER_HUB
    if not host or not HOST_RE.fullmatch(host):
        raise ConfigError(f"invalid registry {text!r}", hint="write a host[:port], e.g. registry.example.org:5000")
    return host


def enroot_form(ref: Reference) -> str:
    """``docker://REGISTRY#REPO[:TAG][@DIGEST]``: how enroot writes an image's provenance (and how Pyxis hands
    an image to its importer)."""
    text = f"docker://{ref.registry}#{ref.repository}"
    if ref.tag:
        text += f":{ref.tag}"
    if ref.digest:
        text += f"@{ref.digest}"
    return text
