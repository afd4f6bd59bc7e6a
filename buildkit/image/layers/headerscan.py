"""Reading a streamed layer's tar headers while the layer still arrives, so its member list is ready at its end.

The index of the image (:class:`.flatten.Tree`) merges the layers in order, and a layer's headers could only be
read once its spool was complete: for a registry's image that pass came after the last byte of the largest layer,
with the squashfs writer waiting behind it. A :class:`HeaderScan` follows the spool as it grows (through
:meth:`.growing.Growing.pread`, as the precompressor does) with the one tar reader (:func:`.tarscan.scan`)
and keeps the members, column by column as a layer's record keeps them (:class:`.columns.Columns`: a
few dozen bytes per member, where a list of members would hold a few hundred until its layer's turn to merge);
the merge, in layer order, then only applies them, and the record is those columns. The layer's precompressor
takes its files from the same scan as their headers are read (:meth:`HeaderScan.files`): the headers of a layer
are read once while it arrives, where two readers each read them (0.5 CPU s of Python for a 1.3 GB layer, taken
from the decompression's GIL).

Nothing here counts before the layer's digest has matched: the members are taken (:meth:`HeaderScan.members`)
only after :func:`.layerfile.prepare` has verified the layer, and only when the tar it gave is the spool that was
followed. A scan that failed or was stopped gives nothing: the layer's headers are then read again from the
complete spool, so a malformed layer is refused exactly as before, with the same error.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

from .columns import COUNTS, Columns
from .growing import Abandoned, Growing
from .layerfile import LayerTar
from .tarscan import DATA_TYPES, Member, scan

log = logging.getLogger("ckit.convert")

END = 1 << 62  # "until the stream ends": the scan's end when the spool's size is not known yet
DATA_CODES = frozenset(t[0] for t in DATA_TYPES)  # tar type flags of regular files, as bytes items


class HeaderScan:
    """Follows one layer's spool on a thread of its own, keeping every member its headers describe; the layer's
    :class:`..squashfs.precompress.Precompressor` takes its files from here (:meth:`files`), so the headers are read once."""

    def __init__(self, spool: Path, growing: Growing, what: str) -> None:
        self.spool, self.growing, self.what = spool, growing, what
        self._columns: Columns | None = None  # set once every header was read
        live = Columns()  # filled as the headers are read; its first ``_shown`` members are complete
        # what files() reads of it: not the names, which go with the columns once the merge has taken them
        self._feed = (live.types, live.counts["size"], live.counts["offset"])
        self._shown, self._ended, self._waiting = 0, False, False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, args=(live,), name=f"headers-{spool.stem}", daemon=True)
        self._thread.start()

    def columns(self, tar: LayerTar) -> Columns | None:
        """The members of ``tar`` (already verified) when this scan read all of them from it; else None. The
        stream has ended by now, so the scan is at most finishing the last headers already on disk."""
        self._thread.join()
        if self.growing.failed or (tar.path, tar.offset) != (self.spool, 0):
            return None
        columns, self._columns = self._columns, None  # handed over once
        return columns

    def files(self) -> Iterator[tuple[int, int]]:
        """(offset, size) of each regular file with data, in tar order, as its header is read (for one reader,
        the layer's precompressor); the end comes with the scan's (also when it failed or was stopped: what
        follows is then the writer's to do)."""
        (types, sizes, offsets), done = self._feed, 0
        while True:
            with self._cond:
                self._waiting = True  # set before the count is read: see _show
                while self._shown <= done and not self._ended:
                    self._cond.wait()
                self._waiting = False
                shown, ended = self._shown, self._ended
            for i in range(done, shown):
                if types[i] in DATA_CODES and sizes[i]:
                    yield offsets[i], sizes[i]
            done = shown
            if ended and done >= self._shown:
                return

    def _show(self) -> None:
        """One more member is complete. The lock is taken only when a reader waits: it says so before it
        reads the count, and this reads its flag after raising the count, so no wake-up is missed."""
        self._shown += 1
        if self._waiting:
            with self._cond:
                self._cond.notify_all()

    def _run(self, columns: Columns) -> None:
        complete = False
        try:
            self.growing.wait(1)  # the spool exists once its first bytes are written (or the stream ended)
            with open(self.spool, "rb", buffering=0) as src:
                for member in scan(src, 0, END, self.what, pread=self.growing.pread):
                    if member.sparse:
                        return  # the columns cannot say so: the complete spool's headers are read, and refused
                    columns.append(member)
                    self._show()
            complete = True
        except Abandoned:
            return
        except Exception as err:  # noqa: BLE001 - whatever it is, reading the complete spool reports it properly
            log.debug("%s: headers not read while streaming: %s", self.what, err)
            return
        finally:
            if complete:
                self._columns = columns
            with self._cond:
                self._ended = True
                self._cond.notify_all()


def members(columns: Columns) -> Iterator[Member]:
    """The members kept in ``columns``, in tar order, as :func:`.tarscan.scan` gave them (offsets in the layer)."""
    names = json.loads(b"[" + columns.names[:-1] + b"]")
    links = json.loads(b"[" + columns.links[:-1] + b"]")
    types = bytes(columns.types)
    modes, uids, gids, sizes, offsets = (columns.counts[c] for c in COUNTS)
    for i in range(columns.count):
        yield Member(names[i], types[i:i + 1], modes[i], uids[i], gids[i], columns.mtimes[i], sizes[i], links[i],
                     offsets[i], offsets[i], columns.pax.get(str(i), {}))
