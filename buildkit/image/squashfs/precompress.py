"""Compressing a streamed layer's large files while the layer still arrives, so the writer mostly copies.

A layer read from a registry is decompressed into its spool file as it downloads (:mod:`..layers.layerfile`); the
squashfs writer can only start once every layer's headers are known (which files survive decides what goes
where). Meanwhile a :class:`Precompressor` follows the spool as it grows: it takes the layer's files from the
layer's header scan (:class:`..layers.headerscan.HeaderScan`, which reads the headers through :meth:`Growing.pread`, waiting
for bytes not written yet; one reading of the headers serves both) and compresses each file of a block or more,
block by block, exactly as the writer would (the same :class:`.blocks.Run` job and compressor), into a
scratch file next to the spool.

The result is a :class:`.copy.Segment` of that scratch file, handed to the writer like a segment of an
earlier image (:mod:`.copy`): a surviving file found there is copied, CRC-checked, instead of
compressed, so the image is byte for byte what the writer alone makes. Files the precompressor did not reach
when the writer starts, small files (fragments) and the rootfs additions are compressed by the writer as usual.
Nothing here counts before the layer's digest has matched: the writer starts only after every layer has.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from ...errors import CkitError
from ..layers.growing import Abandoned, Growing
from ..speed.cpushare import CpuShare
from .blocks import BLOCK_SIZE, CopyRange, Fragment, Output, Packed, Run, crc32
from .copy import Segment
from .data import RUN_BLOCKS, packed_groups

log = logging.getLogger("ckit.convert")


class Precompressor:
    """Follows one layer's spool on a thread of its own; :meth:`result` stops it and gives what it made."""

    def __init__(self, spool: Path, growing: Growing, make: Callable[[], Callable[[bytes], bytes]],
                 what: str, files: Callable[[], Iterator[tuple[int, int]]], share: CpuShare | None = None) -> None:
        self.spool, self.growing, self.make, self.what, self.files = spool, growing, make, what, files
        self.share = share
        self.path = spool.with_suffix(".pre")
        self.segment = Segment()
        self._thread = threading.Thread(target=self._run, name=f"precompress-{spool.stem}", daemon=True)
        self._thread.start()

    def result(self) -> tuple[Path, Segment] | None:
        """Stop following (the file being compressed is finished first) and return the scratch file and its
        segment, None when nothing was made."""
        self.growing.stop()
        self._thread.join()
        if self.growing.failed:  # what it read may not be the layer (an engine's layer then comes from a save)
            return None
        return (self.path, self.segment) if self.segment.files or self.segment.groups else None

    def _run(self) -> None:
        try:
            if self.growing.wait(1) == 0:
                return  # an empty layer
            with open(self.spool, "rb", buffering=0) as src, open(self.path, "wb", buffering=0) as out:
                self._follow(src, Output(out.fileno()))
        except Abandoned:
            pass
        except (CkitError, OSError) as err:  # the stream's own reading reports real problems
            log.debug("%s: precompression stopped: %s", self.what, err)

    def _follow(self, src: BinaryIO, out: Output) -> None:
        """Large files as they come; small ones packed into fragment groups by the writer's own rule
        (:func:`.data.packed_groups`: greedily, in tar order, deleted ones too), each group compressed
        once its last file is in."""
        compress, fd = self.make(), src.fileno()
        stopped = False

        def smalls() -> Iterator[tuple[int, int]]:
            nonlocal stopped
            for offset, size in self.files():
                if size < BLOCK_SIZE:
                    yield offset, size
                elif not self._file(fd, out, compress, offset, size):
                    stopped = True
                    return

        for number, group in enumerate(packed_groups(smalls())):
            if stopped or not self._group(fd, out, compress, number, group):
                return

    def _compressed(self, job: Run | Fragment, compress: Callable[[bytes], bytes]) -> Packed:
        if self.share is None:
            return job(compress)
        with self.share.slot():
            return job(compress)

    def _file(self, fd: int, out: Output, compress: Callable[[bytes], bytes], offset: int, size: int) -> bool:
        """One file of a block or more, compressed run by run; False when stopped (the writer does the rest)."""
        self.growing.wait(offset + size)
        words, crc, start = [], 0, out.pos
        for first in range(0, size, RUN_BLOCKS * BLOCK_SIZE):
            if self.growing.stopped:
                return False  # the writer starts: it compresses the rest of this file itself
            run = Run((fd, offset + first, min(RUN_BLOCKS * BLOCK_SIZE, size - first)), self.what)
            for data, word in self._compressed(run, compress):
                assert not isinstance(data, CopyRange)
                words.append(word)
                if word:
                    crc = crc32(data, crc)
                    out.write(data)
        self.segment.files[offset] = (start, tuple(words), crc)
        return True

    def _group(self, fd: int, out: Output, compress: Callable[[bytes], bytes], number: int,
               group: list[tuple[int, int]]) -> bool:
        """Fragment group ``number`` of the layer as one block, as the writer's :class:`Fragment` job makes it when
        all of the group's files survive; False when stopped."""
        last, size = group[-1]
        self.growing.wait(last + size)
        if self.growing.stopped:
            return False
        ((data, word),) = self._compressed(Fragment([(fd, o, n) for o, n in group], self.what), compress)
        assert not isinstance(data, CopyRange)
        self.segment.groups[number] = (out.pos, word, crc32(data), tuple(range(len(group))))
        out.write(data)
        return True
