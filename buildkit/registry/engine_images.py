"""Which engine image a stack's push reads: the newest one ckit built for the stack's resolved recipe."""

from __future__ import annotations


def stack_image(fingerprint: str) -> str | None:
    """The engine's image built by ckit for a resolved stack (label ``io.ckit.fingerprint``); None if none.

    When several match (rebuilt under other tags), the newest is taken."""
    from ..engine.docker import connect

    images = connect().client.images.list(filters={"label": f"io.ckit.fingerprint={fingerprint}"})
    if not images:
        return None
    return str(max(images, key=lambda image: str(image.attrs.get("Created", ""))).id)
