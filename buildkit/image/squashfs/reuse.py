"""Reuse records: where each layer's data lies in the images the store holds, so a later conversion copies it.

Two kinds of file per layer, under the store's root::

    reuse/<sha256 of the key>.rec       where the layer's data lies in one artifact, per (layer, compression, codec)
    reuse/<layer digest hex>.members    the layer's tar members as the header pass read them (written once)

Their framing and the rule that removes them when no artifact needs them are :mod:`buildkit.storage.reuse_files`'s (a
record's refs line names its layer, its artifact and that file's identity, and its members body). A ``.rec``
body (:mod:`.record`: arrays, column by column) holds the rest of the key (compression, codec, block
size, layout), where the artifact's squashfs starts, and the layer's *segment* there (every file of a block or
more: data offset in the layer → position, block size words, CRC32 of its stored bytes; every fragment group →
position, size word, CRC32 and which of the group's files the block holds). The ``.members`` file (zstd-compressed
JSON) holds the members column by column, so a reconversion does not even read (or download) a layer that it
copies whole.

Nothing in a record is trusted blindly. :meth:`Records.find` drops (and reports as absent) a record whose
digest does not match its body, whose body does not parse, whose key differs, whose artifact is gone or is
not the file that was published (any write changes its mtime), whose squashfs superblock is not the expected
one, whose members file is not the one it was made with, or whose positions fall outside the segment or name
a file that is not one of the layer's. While data is copied every range is checked against its CRC32
(:mod:`.data`); a mismatch makes the conversion start again without that artifact's records. A record
is written only for a layer whose bytes were verified against that digest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import struct
import tempfile
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...fs.files import identity
from ...storage import reuse_files as files
from ...storage import safefs
from ..layers.columns import MAX_RECORD, BadRecord, checked_members, decode_members
from ..layers.tarscan import DATA_TYPES, Member
from . import record as record_body
from .blocks import BLOCK_SIZE
from .codec import COMPRESSOR_IDS
from .copy import Earlier, Segment, stored
from .data import fragment_groups

log = logging.getLogger("ckit.reuse")

LAYOUT = 1  # bump when the data layout of a layer's segment changes


@dataclass(frozen=True)
class Record:
    layer: str  # the verified digest of the layer's bytes (blob digest, or diff_id for an uncompressed tar)
    compression: str  # e.g. "zstd:-3"
    codec: str  # squashfs_writer.codec_version
    artifact: str  # file name in the store's artifacts folder
    stat: tuple[int, int, int]  # the artifact's inode, size and mtime (ns) as published
    base: int  # where the squashfs starts in the artifact (a SIF's partition offset)
    segment: Segment
    members: list[Member]


def record_key(layer: str, compression: str, codec: str) -> str:
    text = json.dumps({"layer": layer, "compression": compression, "codec": codec, "block_size": BLOCK_SIZE,
                       "layout": LAYOUT}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def encode(record: Record, members_sha: str) -> bytes:
    refs = files.ReuseRefs(record.layer, record.artifact, record.stat, members_sha)
    return files.frame_record(refs, record_body.encode({
        "compression": record.compression, "codec": record.codec, "block_size": BLOCK_SIZE, "layout": LAYOUT,
        "base": record.base}, record.segment))


def decode(raw: bytes) -> tuple[Record, str]:
    """A record (without its members yet) and the sha256 of the members it was made with, every field checked
    for shape (not yet against its artifact)."""
    try:
        refs, packed = files.record_refs(raw)
        head, seg = record_body.decode(packed)
        if head.get("block_size") != BLOCK_SIZE or head.get("layout") != LAYOUT:
            raise BadRecord("another layout")
        if not (isinstance(head.get("compression"), str) and isinstance(head.get("codec"), str)):
            raise BadRecord("malformed head")
        return Record(refs.layer, head["compression"], head["codec"], refs.artifact, refs.stat, head["base"],
                      seg, []), refs.members
    except ValueError as err:  # MalformedBody too
        raise BadRecord(f"malformed: {err}") from err


def check_segment(record: Record) -> None:
    """Every position inside the segment, every file and group one of the layer's, sizes that add up."""
    seg = record.segment
    length = seg.end - seg.start
    if seg.start < 96 or length < 0:
        raise BadRecord("segment out of bounds")
    data: array[int] = array("q")
    for m in record.members:
        if m.type in DATA_TYPES and m.size > 0:
            data.extend((m.offset_data, m.size))
    sizes = dict(zip(data[::2], data[1::2], strict=True))
    for offset, (at, words, _crc) in seg.files.items():
        size = sizes.get(offset)
        if size is None or size < BLOCK_SIZE or len(words) != -(-size // BLOCK_SIZE):
            raise BadRecord("a file that is not one of the layer's")
        if any(stored(w) > BLOCK_SIZE for w in words) or at + sum(stored(w) for w in words) > length:
            raise BadRecord("a file out of bounds")
    groups = fragment_groups(data)
    for g, (at, word, _crc, alive) in seg.groups.items():
        if g >= len(groups) or stored(word) > BLOCK_SIZE or at + stored(word) > length:
            raise BadRecord("a fragment group out of bounds")
        if not alive or list(alive) != sorted(set(alive)) or alive[-1] >= len(groups[g]):
            raise BadRecord("a fragment group's members out of bounds")


class Records:
    """The records of one store (``root`` is the store's root folder)."""

    def __init__(self, root: Path) -> None:
        self.folder = Path(root) / "reuse"
        self.artifacts = Path(root) / "artifacts"
        self._members: dict[str, tuple[str, list[Member]]] = {}  # layer digest → (body sha256, members)
        self.raw_members: dict[str, bytes] = {}  # layer digest → its members file as read (written again if swept)

    def path(self, layer: str, compression: str, codec: str) -> Path:
        return self.folder / f"{record_key(layer, compression, codec)}.rec"

    def members_path(self, layer: str) -> Path:
        return self.folder / files.members_name(layer)  # ValueError unless a digest

    def find(self, layer: str, compression: str, codec: str) -> Record | None:
        """The record of ``layer``, checked against its key, its members and its artifact; a bad one is removed."""
        path = self.path(layer, compression, codec)
        try:
            raw = _read(path)
        except OSError:
            return None
        try:
            record, members_sha = decode(raw)
            if (record.layer, record.compression, record.codec) != (layer, compression, codec):
                raise BadRecord("another key")
            sha, members = self.members(layer)
            if sha != members_sha:
                raise BadRecord("made with other members")
            record = dataclasses.replace(record, members=members)
            self._check_artifact(record)
            check_segment(record)
        except (BadRecord, OSError, ValueError) as err:
            log.info("reuse record %s dropped: %s", path.name, err)
            path.unlink(missing_ok=True)
            return None
        return record

    def members(self, layer: str) -> tuple[str, list[Member]]:
        """The members file of ``layer`` (a damaged one is removed; OSError when there is none)."""
        if layer not in self._members:
            path = self.members_path(layer)
            try:
                raw = _read(path)
                self._members[layer] = decode_members(raw)
                self.raw_members[layer] = raw
            except BadRecord:
                path.unlink(missing_ok=True)
                raise
        return self._members[layer]

    def _check_artifact(self, record: Record) -> None:
        path = self.artifacts / record.artifact  # a plain file name: checked when the refs line was read
        if identity(path) != record.stat:  # gone: OSError, dropped
            raise BadRecord("the artifact changed since it was published")
        with path.open("rb") as f:
            f.seek(record.base)
            head = f.read(96)
        if len(head) < 96 or head[:4] != b"hsqs":
            raise BadRecord("no squashfs where the record says")
        block_size, comp = struct.unpack_from("<I", head, 12)[0], struct.unpack_from("<H", head, 20)[0]
        bytes_used = struct.unpack_from("<Q", head, 40)[0]
        algo = record.compression.partition(":")[0]
        if block_size != BLOCK_SIZE or comp != COMPRESSOR_IDS.get(algo) or record.segment.end > bytes_used \
                or record.base + bytes_used > record.stat[1]:  # the size just checked
            raise BadRecord("the squashfs does not match the record")

    def open(self, record: Record, decompress: Any) -> Earlier:
        """The record's segment, open for copying (the caller closes ``fd``)."""
        path = self.artifacts / record.artifact
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return Earlier(fd, record.base, record.segment, str(path), decompress)

    def save(self, records: Iterable[tuple[Record, bytes | None]]) -> None:
        """Write records atomically, each with its layer's members file (encoded or as read, None when there is
        none) unless a sound one is there; what cannot be written is only logged (reuse is an optimisation).
        The members file is written (or touched) just before the record: a sweep spares young files
        (:mod:`buildkit.storage.reuse_files`), and one that removed it all the same leaves a record that is removed too."""
        for record, members in records:
            try:
                members_path = self.members_path(record.layer)
                sha = self._members_sha(members_path)
                if sha is None and members is not None:
                    _write(members_path, members)
                    sha = files.members_head(members)[0]
                if sha is None:
                    continue
                path = self.path(record.layer, record.compression, record.codec)
                _write(path, encode(record, sha))
                if not members_path.is_file():  # swept meanwhile
                    if members is None:
                        path.unlink(missing_ok=True)
                    else:
                        _write(members_path, members)
            except (OSError, BadRecord, ValueError) as err:
                log.warning("could not write the reuse record of %s: %s", record.layer, err)

    def _members_sha(self, path: Path) -> str | None:
        """The digest of a sound members file (checked, not parsed; touched: it is about to be named again),
        None when there is none."""
        try:
            sha = checked_members(_read(path))[0]
        except (OSError, BadRecord):
            return None
        with contextlib.suppress(OSError):  # another user's file in a shared store: the grace period must do
            os.utime(path)
        return sha

    def forget_members(self) -> None:
        """Let the members read so far go (they are only needed to index the layers)."""
        self._members.clear()

    def drop_artifact(self, records: Iterable[Record], artifact_path: str) -> None:
        """Remove the given records that point at ``artifact_path`` (it was found changed or damaged)."""
        for record in records:
            if str(self.artifacts / record.artifact) == artifact_path:
                self.path(record.layer, record.compression, record.codec).unlink(missing_ok=True)


def _read(path: Path) -> bytes:
    raw = safefs.read_small(path, os.geteuid(), MAX_RECORD)  # the store's own regular file, never through a link
    if raw is None:  # as good as absent: the layer is converted without reuse
        raise FileNotFoundError(f"{path.name}: missing, too large or not the store's own file")
    return raw


def _write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(name, target)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
