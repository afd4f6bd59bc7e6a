"""The file data of a squashfs image, laid out layer by layer so that a later image can copy it.

Each layer's surviving files get one *segment*, in layer order (the rootfs additions last): the blocks of its
files of a block or more, in tar order, then its fragment blocks. Small files are grouped into fragment blocks
by the layer's complete list of data members, deleted ones included, and a group's block holds only the group's
files that survive. So the bytes of a layer's segment depend on the layer, on which of its files survive and on
the options, never on other layers: a deletion in an upper layer changes only the groups it touches.

That is what makes reuse byte-exact: a layer converted before (a :class:`.copy.Segment` of an earlier
image, found in a record) has its files' compressed blocks and its fragment blocks that hold the same files
copied from that image (:mod:`.copy`) and only what is new is compressed. A group that lost members
since is decompressed from the earlier image and packed again. Each segment starts and ends on a 4 KiB boundary,
so a layer copied whole is equally aligned in both files and a file system with reflinks shares its blocks.
"""

from __future__ import annotations

import functools
import itertools
import os
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from ...errors import ConvertError
from ..layers.flatten import Tree
from ..layers.layerfile import LayerTar
from ..layers.nodes import Inode
from .blocks import BLOCK_SIZE, BlockWriter, Fragment, Piece, Run, crc32
from .copy import Align, Copy, Earlier, Mark, Refragment, Segment, stored

NO_FRAGMENT = 0xFFFFFFFF
PROGRESS_STEP = 4 << 20
RUN_BLOCKS = 8  # blocks per worker job: 1 MiB, few enough handoffs between threads
COPY_LIMIT = 64 << 20  # bytes per copy job: big enough to be cheap, small enough to check in steps


@dataclass(slots=True)
class Placement:
    """Where a regular file's data landed."""

    size: int
    start: int = 0
    started: bool = False
    sparse: int = 0  # bytes of all-zero blocks, stored as holes
    blocks: Sequence[int] = ()  # a list once blocks are placed; small files share the empty tuple
    fragment: int = NO_FRAGMENT
    fragment_offset: int = 0
    crc: int = 0  # CRC32 of the file's stored blocks, for a record

    def placed(self, first: int, _start: int, blocks: list[tuple[int, int]], chunks: list[bytes]) -> None:
        """Record blocks ``first``… once written; the first block actually written is where the file starts."""
        words = self.blocks
        assert isinstance(words, list)  # set by the writer before its runs are submitted
        for n, (pos, word) in enumerate(blocks, first):
            if word == 0:
                self.sparse += min(BLOCK_SIZE, self.size - n * BLOCK_SIZE)
            elif not self.started:
                self.start, self.started = pos, True
            words[n] = word
        for chunk in chunks:
            self.crc = crc32(chunk, self.crc)

    def copied(self, pos: int, words: tuple[int, ...], crc: int) -> None:
        self.blocks, self.crc = words, crc
        self.sparse = sum(min(BLOCK_SIZE, self.size - n * BLOCK_SIZE) for n, w in enumerate(words) if w == 0)
        if any(words):
            self.start, self.started = pos, True


def fragment_groups(data: array[int]) -> list[list[tuple[int, int]]]:
    """Small data members (offset, size) packed greedily, in tar order, into groups of at most one block."""
    return list(packed_groups(zip(data[::2], data[1::2], strict=True)))


def packed_groups(members: Iterable[tuple[int, int]]) -> Iterator[list[tuple[int, int]]]:
    """The packing rule of :func:`fragment_groups` over data members (offset, size) as they come: each group is
    given once it is complete, so a layer that is still arriving (:mod:`.precompress`) is packed the same way."""
    group: list[tuple[int, int]] = []
    fill = BLOCK_SIZE
    for offset, size in members:
        if size >= BLOCK_SIZE:
            continue
        if fill + size > BLOCK_SIZE:
            if group:
                yield group
            group, fill = [], 0
        group.append((offset, size))
        fill += size
    if group:
        yield group


class _At:
    """A rootfs addition as a member of its layer's data: all additions sit at offset 0, so number them."""

    __slots__ = ("offset", "inode", "size")

    def __init__(self, offset: int, inode: Inode) -> None:
        self.offset, self.inode, self.size = offset, inode, inode.size


def _survivors(data: array[int], smalls: list) -> tuple[list[list[int]], dict[int, list[tuple[int, Inode]]]]:
    """The layer's fragment groups (each a list of member sizes, as :func:`fragment_groups` packs them) and,
    per group with survivors, (index in the group, inode) of each surviving small file. ``smalls`` are the
    surviving small files in offset order: one walk along both lists."""
    packed = fragment_groups(data)
    survivors: dict[int, list[tuple[int, Inode]]] = {}
    k, upcoming = 0, smalls[0].offset if smalls else -1
    for g, group in enumerate(packed):
        for index, (offset, _size) in enumerate(group):
            if offset == upcoming:
                small = smalls[k]
                survivors.setdefault(g, []).append((index, getattr(small, "inode", small)))
                k += 1
                upcoming = smalls[k].offset if k < len(smalls) else -1
    return [[size for _offset, size in group] for group in packed], survivors


class DataWriter:
    """Plans every regular file's data, layer by layer (see the module's doc); workers read and compress.

    ``earlier`` maps layer numbers to segments of earlier images to copy from; ``open_layer`` prepares a
    layer that the tree was replayed from a record for, when some of its data must be read after all."""

    def __init__(self, tree: Tree, blocks: BlockWriter, progress: Callable[[int], None] | None, *,
                 earlier: dict[int, Earlier] | None = None,
                 open_layer: Callable[[int], LayerTar] | None = None) -> None:
        self.tree, self.blocks, self.progress = tree, blocks, progress
        self.earlier, self.open_layer = earlier or {}, open_layer
        self.fragment_entries: list[tuple[int, int]] = []
        self.segments: list[Segment] = []
        self.copied = self.compressed = 0  # bytes of file data copied from earlier images / read and compressed
        self._reported = self._total = 0
        self._fds: dict[int, int] = {}
        self._tars: dict[int, LayerTar] = {}
        self._copy: Copy | None = None

    def write_all(self) -> dict[Inode, Placement]:
        placements: dict[Inode, Placement] = {}
        by_layer = {n: list(group) for n, group in itertools.groupby(self.tree.inodes(), key=lambda i: i.layer)}
        layers = len(self.tree.layers)
        for number in range(layers + 1):
            segment = self._layer(number, by_layer.get(number, []), placements)
            if number < layers:
                self.segments.append(segment)
        self.blocks.drain()
        if self.progress and self._total > self._reported:
            self.progress(self._total - self._reported)
        return placements

    def close(self) -> None:
        """Close the layer files (only once no worker can still be reading them)."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    # --- one layer ----------------------------------------------------------------------------------------------
    def _layer(self, number: int, inodes: list[Inode], placements: dict[Inode, Placement]) -> Segment:
        segment = Segment()
        self._align()
        self._mark(lambda pos: setattr(segment, "start", pos))
        earlier = self.earlier.get(number)
        bigs = []
        for inode in inodes:
            if inode.size == 0:
                placements[inode] = Placement(0)
            elif inode.size >= BLOCK_SIZE:
                place = placements[inode] = Placement(inode.size)
                self._big(inode, place, earlier)
                bigs.append((inode, place))
        groups = self._groups(number, inodes, placements, earlier)
        self._flush_copy()
        self._mark(lambda pos: setattr(segment, "end", pos))
        self._align()

        def finish(_pos: int) -> None:  # every job of the layer has been written: positions are known
            segment.files = {inode.offset: (place.start - segment.start if place.started else 0,
                                            tuple(place.blocks), place.crc) for inode, place in bigs}
            segment.groups = {g: (self.fragment_entries[index][0] - segment.start, self.fragment_entries[index][1],
                                  crc[0], alive) for g, (index, crc, alive) in groups.items()}

        self._mark(finish)
        return segment

    def _big(self, inode: Inode, place: Placement, earlier: Earlier | None) -> None:
        old = earlier.segment.files.get(inode.offset) if earlier is not None and inode.data is None else None
        self._count(inode.size)
        if old is not None and len(old[1]) == -(-inode.size // BLOCK_SIZE):
            assert earlier is not None
            at, words, crc = old
            self._add_copy(earlier, at, sum(stored(w) for w in words), crc,
                           lambda pos: place.copied(pos, words, crc))
            self._reused(earlier, inode.size)
            return
        self._flush_copy()
        self.compressed += inode.size
        count = -(-inode.size // BLOCK_SIZE)
        place.blocks = [0] * count
        what = self._what(inode)
        for first in range(0, count, RUN_BLOCKS):
            at = first * BLOCK_SIZE
            piece = self._piece(inode, at, min(RUN_BLOCKS * BLOCK_SIZE, inode.size - at))
            self.blocks.submit(Run(piece, what), functools.partial(place.placed, first))

    def _groups(self, number: int, inodes: list[Inode], placements: dict[Inode, Placement],
                earlier: Earlier | None) -> dict[int, tuple[int, list[int], tuple[int, ...]]]:
        """Fragment blocks of the layer's groups that have survivors; returns, per group, its fragment index,
        [the block's crc] once written and which members it holds (for the record)."""
        smalls = [inode for inode in inodes if 0 < inode.size < BLOCK_SIZE]
        if number < len(self.tree.layers):
            groups, survivors = _survivors(self.tree.data[number], smalls)
        else:  # the rootfs additions: packed as they come, no record
            earlier = None
            offsets = array("q", (v for n, inode in enumerate(smalls) for v in (n, inode.size)))
            groups, survivors = _survivors(offsets, [_At(n, inode) for n, inode in enumerate(smalls)])
        written: dict[int, tuple[int, list[int], tuple[int, ...]]] = {}
        for g in sorted(survivors):
            index = len(self.fragment_entries)
            self.fragment_entries.append((0, 0))
            offset = 0
            for _, inode in survivors[g]:
                placements[inode] = Placement(inode.size, fragment=index, fragment_offset=offset)
                offset += inode.size
                self._count(inode.size)
            alive = tuple(n for n, _ in survivors[g])
            written[g] = (index, [0], alive)
            self._group(g, index, [inode for _, inode in survivors[g]], alive, groups[g], written[g][1], earlier)
        return written

    def _group(self, g: int, index: int, members: list[Inode], alive: tuple[int, ...], group: list[int],
               crc: list[int], earlier: Earlier | None) -> None:
        def done(_start: int, placed: list[tuple[int, int]], chunks: list[bytes]) -> None:
            self.fragment_entries[index] = placed[0]
            crc[0] = crc32(chunks[0]) if chunks else 0

        old = earlier.segment.groups.get(g) if earlier is not None else None
        size = sum(inode.size for inode in members)
        if old is not None and old[3] == alive:  # the same files: the same block
            assert earlier is not None

            def copied(pos: int) -> None:
                self.fragment_entries[index] = (pos, old[1])
                crc[0] = old[2]

            self._add_copy(earlier, old[0], stored(old[1]), old[2], copied)
            self._reused(earlier, size)
            return
        self._flush_copy()
        if old is not None and set(alive) <= set(old[3]):  # fewer files: unpack the earlier block, pack again
            assert earlier is not None
            keep = [old[3].index(n) for n in alive]
            self.blocks.submit(Refragment(earlier, old[:3], [group[n] for n in old[3]], keep), done)
            self._reused(earlier, size)
            return
        self.compressed += size
        pieces = [self._piece(inode, 0, inode.size) for inode in members]
        self.blocks.submit(Fragment(pieces, self._what(members[0])), done)

    # --- helpers ------------------------------------------------------------------------------------------------
    def _reused(self, earlier: Earlier, size: int) -> None:
        """Data taken from ``earlier``: reused from an earlier image, or compressed in this conversion after all."""
        if earlier.fresh:
            self.compressed += size
        else:
            self.copied += size

    def _add_copy(self, earlier: Earlier, at: int, size: int, crc: int, place: Callable[[int], None]) -> None:
        copy = self._copy
        if copy is None or copy.earlier is not earlier or copy.at + copy.fixed != at or copy.fixed >= COPY_LIMIT:
            self._flush_copy()
            copy = self._copy = Copy(earlier, at, self.blocks.out)
        copy.add(size, crc, place)

    def _flush_copy(self) -> None:
        if self._copy is not None:
            self.blocks.submit(self._copy, self._copy.done)
            self._copy = None

    def _align(self) -> None:
        self._flush_copy()
        self.blocks.submit(Align(), lambda start, blocks, chunks: None)

    def _mark(self, call: Callable[[int], None]) -> None:
        self._flush_copy()
        self.blocks.submit(Mark(), lambda start, blocks, chunks: call(start))

    def _count(self, size: int) -> None:
        self._total += size
        if self.progress and self._total - self._reported >= PROGRESS_STEP:
            self.progress(self._total - self._reported)
            self._reported = self._total

    def _tar(self, number: int) -> LayerTar:
        tar = self.tree.layers[number] or self._tars.get(number)
        if tar is None:
            if self.open_layer is None:
                raise ConvertError(f"layer {number + 1}: its data is needed but the layer was not read")
            tar = self._tars[number] = self.open_layer(number)
        return tar

    def _piece(self, inode: Inode, offset: int, size: int) -> Piece:
        if inode.data is not None:
            return inode.data[offset:offset + size]
        layer = self._tar(inode.layer)
        fd = self._fds.get(inode.layer)
        if fd is None:
            fd = self._fds[inode.layer] = os.open(layer.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return fd, layer.offset + inode.offset + offset, size

    def _what(self, inode: Inode) -> str:
        if inode.data is not None:
            return "rootfs additions"
        layer = self.tree.layers[inode.layer] or self._tars.get(inode.layer)
        return layer.what if layer is not None else f"layer {inode.layer + 1}"
