"""Enroot's image URIs, as Pyxis hands them to an importer.

``docker://[USER@][REGISTRY#]IMAGE[:TAG][@sha256:DIGEST]``: the registry is written before ``#`` (enroot's form,
``nvcr.io#nvidia/pytorch:24.06-py3``) or docker's way (``nvcr.io/nvidia/pytorch:24.06-py3``, a first component
with ``.`` or ``:``); without one the image is on Docker Hub (``ubuntu:24.04`` is ``docker.io/library/ubuntu``).
``USER@`` names the login whose password enroot's ``.credentials`` file holds for that registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError
from ..registry.distribution.reference import DOCKER_HUB, HOST_RE, Reference, parse

# enroot's user pattern (src/docker.sh reg_user), without '@'
_USER = re.compile(r"^[A-Za-z0-9_.!~*'()%;:&=+$,-]+$")
_DIGEST_TAIL = re.compile(r"@(sha256:[0-9a-f]{64})$")
DOCKER_HUB_NAMES = (DOCKER_HUB, "registry-1.docker.io", "index.docker.io")
ADMIN_HINT = ("ckit imports registry images only (docker://); for local engine images push them to a registry, "
              "or remove importer= from plugstack.conf to let enroot import them")


@dataclass(frozen=True)
class ImageUri:
    text: str
    ref: Reference
    user: str | None = None


def parse_uri(text: str) -> ImageUri:
    """Parse what Pyxis passes to ``importer get``; ConfigError (exit 2) naming the problem."""
    if any(c.isspace() for c in text) or not text:
        raise ConfigError(f"invalid image URI {text!r}", hint="write docker://[USER@][REGISTRY#]IMAGE[:TAG]")
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "docker", text  # pyxis adds docker:// itself; accept the bare form too
    if scheme in ("dockerd", "podman"):
        raise ConfigError(f"{text}: {scheme}:// images live in a local {'docker' if scheme == 'dockerd' else scheme} "
                          "engine on the node, which the cluster image cache cannot share", hint=ADMIN_HINT)
    if scheme != "docker":
        raise ConfigError(f"{text}: unsupported URI scheme {scheme}://", hint="use docker://[REGISTRY#]IMAGE[:TAG]")
    digest = None
    tail = _DIGEST_TAIL.search(rest)
    if tail:
        digest, rest = tail.group(1), rest[:tail.start()]
    if "@sha256:" in rest:
        raise ConfigError(f"invalid digest in image URI {text!r}", hint="a digest is sha256: and 64 hex digits")
    user = None
    if "@" in rest:
        user, rest = rest.split("@", 1)
        if not _USER.match(user):
            raise ConfigError(f"invalid user {user!r} in image URI {text!r}")
    pinned = f"@{digest}" if digest else ""
    if "#" in rest:
        registry, image = rest.split("#", 1)
        if not HOST_RE.match(registry):
            raise ConfigError(f"invalid registry {registry!r} in image URI {text!r}")
        checked = parse(f"registry.invalid/{image}{pinned}")  # the image part, checked by the one parser
        ref = Reference(registry, checked.repository, checked.tag, checked.digest)
        if registry in DOCKER_HUB_NAMES:  # enroot's own name for Docker Hub: the same images as docker.io
            ref = parse(f"{DOCKER_HUB}/{image}{pinned}")
    else:
        ref = parse(rest + pinned)
    return ImageUri(text, ref, user)
