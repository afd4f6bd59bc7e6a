"""``oci-archive:PATH[:TAG]``: an OCI image layout inside a tar, read in place (:class:`buildkit.oci.archive.OciArchive`).

Everything else (tag selection, indexes resolved to this host's platform, layer verification) is the OCI layout
reader's: a layer is a byte range of the tar instead of a file of the layout folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...oci.archive import OciArchive
from .base import Reader
from .oci import OciLayoutSource


class OciArchiveSource(OciLayoutSource):
    agent = "oci-archive"

    def open_layout(self) -> Any:
        return OciArchive(self.path, self.text)


READERS: dict[str, Reader] = {
    "oci-archive": lambda spec: OciArchiveSource(spec.text, spec.path or Path(), spec.ref)}
