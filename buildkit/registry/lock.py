"""``ckit lock``: pin a stack's base image to its registry digest in a deterministic ``ckit.lock`` (JSON).

The digest comes from a manifest HEAD that accepts both Docker schema 2 and OCI manifests and indexes, so
it is the digest ``docker pull`` / ``podman pull`` resolve the tag to. The file is canonical JSON (sorted
keys, two-space indent, trailing newline): the same inputs give the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..errors import IntegrityError
from .distribution.client import ManifestHead
from .distribution.reference import Reference, parse

LOCK_VERSION = 1


def lock_data(*, stack: str, parameters: dict[str, dict[str, Any]], fingerprint: str, base_image: str,
              base_ref: Reference, head: ManifestHead, sets: list[str], ngc: str | None) -> dict[str, Any]:
    return {
        "lockVersion": LOCK_VERSION,
        "stack": stack,
        "sets": sorted(sets),
        "ngc": ngc,
        "parameters": parameters,
        "fingerprint": fingerprint,
        "base": {
            "image": base_image,
            "canonical": str(Reference(base_ref.registry, base_ref.repository, base_ref.tag)),
            "digest": head.digest,
            "mediaType": head.media_type,
            "pinned": str(base_ref.with_digest(head.digest)),
        },
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


def resolve_base(base_image: str, head_of: Callable[[Reference], ManifestHead]) -> tuple[Reference, ManifestHead]:
    ref = parse(base_image)
    head = head_of(ref)
    if ref.digest and head.digest != ref.digest:
        raise IntegrityError(f"base image {base_image} resolves to {head.digest}")
    return ref, head


