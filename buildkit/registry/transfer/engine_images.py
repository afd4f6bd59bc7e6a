"""Which engine image a stack's push reads: the newest one ckit built for the stack's resolved recipe."""

from __future__ import annotations

from ...daemon import EngineAPIError, connect, short_error
from ...errors import ConfigError, RegistryError
from ...oci.labels import FINGERPRINT
from ...oci.sources import SourceSpec


def stack_image(fingerprint: str) -> str | None:
    """The engine's image built by ckit for a resolved stack (label ``io.ckit.fingerprint``); None if none.

    When several match (rebuilt under other tags), the newest is taken."""
    images = connect().client.images.list(filters={"label": f"{FINGERPRINT}={fingerprint}"})
    if not images:
        return None
    return str(max(images, key=lambda image: str(image.attrs.get("Created", ""))).id)


def image_record(spec: SourceSpec) -> tuple[str, int | None]:
    """The engine's ID (``sha256:…``, the config digest) and size of a ``docker-daemon:`` image, without a save."""
    try:
        image = connect().inspect_image(spec.ref or "")
    except (EngineAPIError, OSError) as err:
        raise RegistryError(f"{spec.text}: cannot reach the engine: {short_error(err)}",
                            hint="start Docker or `podman system service`, or set DOCKER_HOST") from err
    if image is None:
        raise ConfigError(f"{spec.text}: no such image in the engine",
                          hint="check `docker images` / `podman images`, or build it first")
    image_id = str(image["Id"])
    size = image.get("Size")
    return (image_id if image_id.startswith("sha256:") else "sha256:" + image_id), \
        (size if isinstance(size, int) else None)
