"""The ``manifest.json`` of a docker archive (``docker save``): one parser, every field type-checked.

``[{"Config": "NAME.json", "RepoTags": ["repo:tag", …], "Layers": ["ID/layer.tar", …]}, …]``. Names are
member names of the archive, looked up in its index; they never become host paths.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.jsondoc import parse, strings, typed
from ..errors import IntegrityError


@dataclass(frozen=True)
class ArchiveImage:
    config: str
    layers: tuple[str, ...]
    repo_tags: tuple[str, ...]


def archive_images(data: bytes, what: str) -> list[ArchiveImage]:
    """The images ``manifest.json`` lists; IntegrityError (naming ``what``) for anything malformed."""
    entries = parse(data, f"{what}: manifest.json", error=IntegrityError, expect=list)
    images = []
    for number, entry in enumerate(entries):
        where = f"{what}: manifest.json[{number}]"
        if not isinstance(entry, dict):
            raise IntegrityError(f"{where} must be a JSON object")
        config = typed(entry, "Config", str, where, error=IntegrityError, default="")
        if not config:
            raise IntegrityError(f"{where} names no Config")
        images.append(ArchiveImage(config, tuple(strings(entry, "Layers", where, error=IntegrityError)),
                                   tuple(strings(entry, "RepoTags", where, error=IntegrityError))))
    if not images:
        raise IntegrityError(f"{what}: manifest.json lists no image")
    return images
