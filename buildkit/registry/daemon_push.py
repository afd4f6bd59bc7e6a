"""``docker-daemon:REF`` sources pushed by the engine itself (docker SDK; podman's Docker API works too).

Credentials go in ``auth_config`` (the SDK sends them in a request header, never in argv; podman's ``/auth``
endpoint is not used, as it ignores insecure http registries). The SDK does not raise when the push fails
inside its stream: every item is checked for ``error``/``errorDetail``. Once pushed, an OCI manifest gets
ckit's annotations through the registry API (a Docker schema 2 manifest has no annotations).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import ConfigError, RegistryError
from ..process import redact
from .client import OCI_MANIFEST, RegistryClient
from .images import ImagePushResult, with_annotations
from .reference import Reference

log = logging.getLogger("ckit.registry")

PUSH_TIMEOUT = 1800  # seconds the engine may take to push one image


def check_push_stream(items: Iterable[Mapping[str, Any]], secrets: list[str], target: str) -> str | None:
    """Consume a push stream; return the digest it reports, raise RegistryError on an error item."""
    digest = None
    for item in items:
        if "error" in item or "errorDetail" in item:
            detail = item.get("error") or (item.get("errorDetail") or {}).get("message") or "unknown error"
            hint = "run `ckit login` for this registry" if "unauthorized" in str(detail).lower() else None
            raise RegistryError(f"engine push to {target} failed: {redact(str(detail), secrets)}", hint=hint)
        aux = item.get("aux") or {}
        if isinstance(aux, Mapping) and aux.get("Digest"):
            digest = str(aux["Digest"])
        log.debug("push: %s", redact(str(item.get("status", "")), secrets))
    return digest


def push_daemon_image(client: RegistryClient, source: str, ref: Reference, annotate) -> ImagePushResult:  # type: ignore[no-untyped-def]
    import docker.errors

    from ..engine.docker import connect

    engine = connect(timeout=PUSH_TIMEOUT).client
    try:
        image = engine.images.get(source)
    except docker.errors.ImageNotFound as err:
        raise ConfigError(f"docker-daemon:{source}: no such image in the engine",
                          hint="list images with `docker images` / `podman images`") from err
    repository = f"{ref.registry}/{ref.repository}"
    tag = ref.tag or "latest"
    image.tag(repository, tag)
    creds = client.auth.credentials
    auth_config = {"username": creds.username, "password": creds.password} if creds else None
    secrets = creds.secrets() if creds else []
    try:
        stream = engine.api.push(repository, tag=tag, stream=True, decode=True, auth_config=auth_config)
        check_push_stream(stream, secrets, f"{repository}:{tag}")
    except docker.errors.APIError as err:
        raise RegistryError(f"engine push to {repository}:{tag} failed: {redact(str(err), secrets)}") from err
    manifest = client.get_manifest(ref.repository, tag)
    labels = {k: str(v) for k, v in ((image.attrs.get("Config") or {}).get("Labels") or {}).items()}
    size = sum(x.get("size", 0) for x in manifest.json().get("layers", []))
    digest = manifest.digest
    if manifest.media_type == OCI_MANIFEST:
        annotated = with_annotations(manifest.data, manifest.media_type, annotate(labels))
        if annotated != manifest.data:
            digest = client.put_manifest(ref.repository, tag, annotated, manifest.media_type)
    return ImagePushResult(str(ref.with_digest(digest)), digest, size, None, labels)



def stack_image(fingerprint: str) -> str | None:
    """The engine's image built by ckit for a resolved stack (label ``io.ckit.fingerprint``); None if none.

    When several match (rebuilt under other tags), the newest is taken."""
    from ..engine.docker import connect

    images = connect().client.images.list(filters={"label": f"io.ckit.fingerprint={fingerprint}"})
    if not images:
        return None
    return str(max(images, key=lambda image: str(image.attrs.get("Created", ""))).id)
