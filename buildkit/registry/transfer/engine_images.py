"""Which engine image a stack's push reads: the newest one ckit built for the stack's resolved recipe."""

from __future__ import annotations

from ...daemon import connect, local_image
from ...errors import RegistryError
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
    image = local_image(spec.ref or "", spec.text, RegistryError)
    image_id = str(image["Id"])
    size = image.get("Size")
    return (image_id if image_id.startswith("sha256:") else "sha256:" + image_id), \
        (size if isinstance(size, int) else None)
