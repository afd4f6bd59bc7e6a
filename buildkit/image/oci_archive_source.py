"""``oci-archive:PATH[:TAG]``: an OCI image layout inside a tar, read in place (:class:`buildkit.oci.archive.OciArchive`).

Everything else (tag selection, indexes resolved to this host's platform, layer verification) is the OCI layout
reader's: a layer is a byte range of the tar instead of a file of the layout folder.
"""

from __future__ import annotations

from typing import Any

from ..oci.archive import OciArchive
from .source import OciLayoutSource


class OciArchiveSource(OciLayoutSource):
    agent = "oci-archive"

    def open_layout(self) -> Any:
        return OciArchive(self.path, self.text)
