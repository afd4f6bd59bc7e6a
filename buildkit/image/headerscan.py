"""Reading a streamed layer's tar headers while the layer still arrives, so its member list is ready at its end.

The index of the image (:class:`.flatten.Tree`) merges the layers in order, and a layer's headers could only be
read once its spool was complete: for a registry's image that pass came after the last byte of the largest layer,
with the squashfs writer waiting behind it. A :class:`HeaderScan` follows the spool as it grows (through
:meth:`.precompress.Growing.pread`, as the precompressor does) with the one tar reader (:func:`.tarscan.scan`)
and keeps the members; the merge, in layer order, then only applies them.

Nothing here counts before the layer's digest has matched: the members are taken (:meth:`HeaderScan.members`)
only after :func:`.layerfile.prepare` has verified the layer, and only when the tar it gave is the spool that was
followed. A scan that failed or was stopped gives nothing: the layer's headers are then read again from the
complete spool, so a malformed layer is refused exactly as before, with the same error.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from ..errors import CkitError
from .layerfile import LayerTar
from .precompress import END, Abandoned, Growing
from .tarscan import Member, scan

log = logging.getLogger("ckit.convert")


class HeaderScan:
    """Follows one layer's spool on a thread of its own, keeping every member its headers describe."""

    def __init__(self, spool: Path, growing: Growing, what: str) -> None:
        self.spool, self.growing, self.what = spool, growing, what
        self._members: list[Member] = []
        self._complete = False
        self._thread = threading.Thread(target=self._run, name=f"headers-{spool.stem}", daemon=True)
        self._thread.start()

    def members(self, tar: LayerTar) -> list[Member] | None:
        """The members of ``tar`` (already verified) when this scan read all of them from it; else None. The
        stream has ended by now, so the scan is at most finishing the last headers already on disk."""
        self._thread.join()
        if not self._complete or self.growing.failed or (tar.path, tar.offset) != (self.spool, 0):
            return None
        members, self._members = self._members, []  # handed over once: the tree keeps what it needs
        return members

    def _run(self) -> None:
        try:
            self.growing.wait(1)  # the spool exists once its first bytes are written (or the stream ended)
            with open(self.spool, "rb", buffering=0) as src:
                self._members.extend(scan(src, 0, END, self.what, pread=self.growing.pread))
            self._complete = True
        except Abandoned:
            pass
        except (CkitError, OSError) as err:  # read again from the complete spool, which reports it properly
            log.debug("%s: headers not read while streaming: %s", self.what, err)
