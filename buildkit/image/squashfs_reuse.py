"""Reuse records: where each layer's data lies in the images the store holds, so a later conversion copies it.

Two kinds of file per layer, under the store's root::

    reuse/<sha256 of the key>.rec       where the layer's data lies in one artifact, per (layer, compression, codec)
    reuse/<layer digest hex>.members    the layer's tar members as the header pass read them (written once)

Each is a magic line, the sha256 of its body in hex on the next line, then the body: zstd-compressed JSON. A
``.rec`` holds the key (the verified digest of the layer's bytes, compression, codec, block size, layout
version); which stored artifact holds the data (its file name in ``artifacts/``, its identity as published:
inode, size, mtime in ns; where its squashfs starts); the layer's *segment* there (every file of a block or
more: data offset in the layer → position, block size words, CRC32 of its stored bytes; every fragment group →
position, size word, CRC32 and which of the group's files the block holds); and the sha256 of the ``.members``
body it was made with. The ``.members`` file holds the members column by column, so a reconversion does not
even read a layer that it copies whole.

Nothing in a record is trusted blindly. :meth:`Records.find` drops (and reports as absent) a record whose
digest does not match its body, whose body does not parse, whose key differs, whose artifact is gone or is
not the file that was published (any write changes its mtime), whose squashfs superblock is not the expected
one, whose members file is not the one it was made with, or whose positions fall outside the segment or name
a file that is not one of the layer's. While data is copied every range is checked against its CRC32
(:mod:`.squashfs_data`); a mismatch makes the conversion start again without that artifact's records. A record
is written only for a layer whose bytes were verified against that digest.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import logging
import os
import re
import struct
import sys
import tempfile
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .squashfs import COMPRESSOR_IDS
from .squashfs_blocks import BLOCK_SIZE, UNCOMPRESSED_BLOCK
from .squashfs_copy import Earlier, Segment
from .squashfs_data import fragment_groups
from .tarscan import DATA_TYPES, Member

log = logging.getLogger("ckit.reuse")

MAGIC = b"ckit-reuse 2\n"
MEMBERS_MAGIC = b"ckit-members 1\n"
LAYOUT = 1  # bump when the data layout of a layer's segment changes
MAX_RECORD = 128 << 20  # a layer with a million files has a members file of a few tens of MB
ARTIFACT_NAME = re.compile(r"[0-9a-f]{64}\.(sif|sqsh)")
DIGEST = re.compile(r"[a-z0-9]+:[0-9a-f]{32,128}")
FOLDED_PAX = ("path", "linkpath", "size", "uid", "gid", "mtime")  # already in the member's fields
COUNTS = ("mode", "uid", "gid", "size", "offset")


class BadRecord(Exception):  # noqa: N818 - internal: the record is dropped, never reported
    pass


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


def _framed(magic: bytes, body: dict[str, Any] | bytes) -> bytes:
    import zstandard

    text = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
    packed = zstandard.ZstdCompressor(level=3).compress(text)
    return magic + hashlib.sha256(packed).hexdigest().encode() + b"\n" + packed


def _unframed(magic: bytes, raw: bytes) -> tuple[str, Any]:
    """(the body's sha256, the body) of a framed file, its digest checked."""
    import zstandard

    head = len(magic) + 65
    if not raw.startswith(magic) or len(raw) < head or raw[head - 1:head] != b"\n":
        raise BadRecord("not a record")
    packed, sha = raw[head:], raw[len(magic):head - 1].decode("ascii", "replace")
    if hashlib.sha256(packed).hexdigest() != sha:
        raise BadRecord("digest mismatch")
    try:
        return sha, json.loads(zstandard.ZstdDecompressor().decompress(packed, max_output_size=8 * MAX_RECORD))
    except (zstandard.ZstdError, ValueError) as err:
        raise BadRecord(f"malformed: {err}") from err


class Columns:
    """A layer's members kept column by column while its headers are read (``append`` is what the flattener
    calls): a few dozen bytes per member, names already as JSON text, then encoded as a members file."""

    def __init__(self) -> None:
        self.count = 0
        self.names, self.links = bytearray(), bytearray()  # JSON strings, each followed by a comma
        self.types = bytearray()
        self.counts = {column: array("Q") for column in COUNTS}
        self.mtimes = array("d")
        self.pax: dict[str, dict[str, str]] = {}

    def append(self, m: Member) -> None:
        kept = {k: v for k, v in m.pax_headers.items() if k not in FOLDED_PAX} if m.pax_headers else None
        if kept:
            self.pax[str(self.count)] = kept
        self.count += 1
        self.names += _json_text(m.name)
        self.links += _json_text(m.linkname) if m.linkname else b'"",'
        self.types += m.type[:1]
        for column, value in zip(COUNTS, (m.mode, m.uid, m.gid, m.size, m.offset_data), strict=True):
            self.counts[column].append(value)
        self.mtimes.append(m.mtime)

    def encode(self) -> bytes:
        """Names as JSON strings; the numbers as little-endian arrays in base64 (no object per number)."""
        numbers: dict[str, array[Any]] = {**self.counts, "mtime": self.mtimes}
        rest = json.dumps({"type": self.types.decode("latin-1"), "pax": self.pax,
                           **{column: _packed(values) for column, values in numbers.items()}}, separators=(",", ":"))
        return _framed(MEMBERS_MAGIC, b'{"name":[' + self.names[:-1] + b'],"link":[' + self.links[:-1] + b"],"
                       + rest[1:].encode())


def _json_text(text: str) -> bytes:
    return json.dumps(text).encode() + b","


def _packed(values: array) -> str:
    if sys.byteorder != "little":
        values = array(values.typecode, values)
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def _unpacked(text: str, typecode: str, count: int) -> array:
    values = array(typecode, base64.b64decode(text, validate=True))
    if len(values) != count:
        raise BadRecord("a members column of another length")
    if sys.byteorder != "little":
        values.byteswap()
    return values


def encode_members(members: list[Member]) -> bytes:
    columns = Columns()
    for m in members:
        columns.append(m)
    return columns.encode()


def decode_members(raw: bytes) -> tuple[str, list[Member]]:
    sha, body = _unframed(MEMBERS_MAGIC, raw)
    try:
        names, types, links, pax = body["name"], body["type"], body["link"], body["pax"]
        n = len(names)
        if not (isinstance(types, str) and len(types) == n and isinstance(pax, dict) and isinstance(links, list)
                and len(links) == n):
            raise BadRecord("malformed members")
        "".join(names), "".join(links)  # TypeError unless every one is a string (checked in C)
        modes, uids, gids, sizes, offsets = (_unpacked(body[column], "Q", n) for column in COUNTS)
        mtimes = _unpacked(body["mtime"], "d", n)
        extra = {int(k): {str(a): str(b) for a, b in v.items()} for k, v in pax.items()}
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, binascii.Error) as err:
        raise BadRecord(f"malformed members: {err}") from err
    return sha, [Member(names[i], types[i].encode("latin-1"), modes[i], uids[i], gids[i], mtimes[i], sizes[i],
                        links[i], offsets[i], offsets[i], extra.get(i, {})) for i in range(n)]


def encode(record: Record, members_sha: str) -> bytes:
    seg = record.segment
    return _framed(MAGIC, {
        "layer": record.layer, "compression": record.compression, "codec": record.codec, "block_size": BLOCK_SIZE,
        "layout": LAYOUT, "artifact": record.artifact, "stat": list(record.stat), "base": record.base,
        "start": seg.start, "end": seg.end, "members": members_sha,
        "files": [[offset, at, list(words), crc] for offset, (at, words, crc) in seg.files.items()],
        "groups": [[g, at, word, crc, list(alive)] for g, (at, word, crc, alive) in seg.groups.items()]})


def decode(raw: bytes) -> tuple[Record, str]:
    """A record (without its members yet) and the sha256 of the members it was made with, every field checked
    for shape (not yet against its artifact)."""
    _sha, body = _unframed(MAGIC, raw)
    try:
        seg = Segment(_int(body["start"]), _int(body["end"]),
                      {_int(o): (_int(at), tuple(_word(w) for w in words), _int(crc))
                       for o, at, words, crc in body["files"]},
                      {_int(g): (_int(at), _word(word), _int(crc), tuple(_int(n) for n in alive))
                       for g, at, word, crc, alive in body["groups"]})
        record = Record(str(body["layer"]), str(body["compression"]), str(body["codec"]), str(body["artifact"]),
                        (_int(body["stat"][0]), _int(body["stat"][1]), _int(body["stat"][2])), _int(body["base"]),
                        seg, [])
        if body["block_size"] != BLOCK_SIZE or body["layout"] != LAYOUT:
            raise BadRecord("another layout")
        return record, str(body["members"])
    except (ValueError, KeyError, TypeError, IndexError) as err:
        raise BadRecord(f"malformed: {err}") from err


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 64:
        raise BadRecord(f"not a count: {value!r}")
    return value


def _word(value: Any) -> int:
    word = _int(value)
    if word & ~(UNCOMPRESSED_BLOCK | (UNCOMPRESSED_BLOCK - 1)) or (word and stored(word) == 0):
        raise BadRecord(f"not a size word: {value!r}")
    return word


def stored(word: int) -> int:
    return word & (UNCOMPRESSED_BLOCK - 1)


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

    def path(self, layer: str, compression: str, codec: str) -> Path:
        return self.folder / f"{record_key(layer, compression, codec)}.rec"

    def members_path(self, layer: str) -> Path:
        if not DIGEST.fullmatch(layer):
            raise BadRecord(f"not a digest: {layer!r}")
        return self.folder / f"{layer.replace(':', '-')}.members"

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
        except (BadRecord, OSError) as err:
            log.info("reuse record %s dropped: %s", path.name, err)
            path.unlink(missing_ok=True)
            return None
        return record

    def members(self, layer: str) -> tuple[str, list[Member]]:
        """The members file of ``layer`` (a damaged one is removed; OSError when there is none)."""
        if layer not in self._members:
            path = self.members_path(layer)
            try:
                self._members[layer] = decode_members(_read(path))
            except BadRecord:
                path.unlink(missing_ok=True)
                raise
        return self._members[layer]

    def _check_artifact(self, record: Record) -> None:
        if not ARTIFACT_NAME.fullmatch(record.artifact):
            raise BadRecord("not an artifact name")
        path = self.artifacts / record.artifact
        st = path.stat()  # gone: OSError, dropped
        if (st.st_ino, st.st_size, st.st_mtime_ns) != record.stat:
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
                or record.base + bytes_used > st.st_size:
            raise BadRecord("the squashfs does not match the record")

    def open(self, record: Record, decompress: Any) -> Earlier:
        """The record's segment, open for copying (the caller closes ``fd``)."""
        path = self.artifacts / record.artifact
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return Earlier(fd, record.base, record.segment, str(path), decompress)

    def save(self, records: Iterable[tuple[Record, bytes | None]]) -> None:
        """Write records atomically, each with its layer's members file (encoded, or None when it was written
        before) unless a sound one is there; what cannot be written is only logged (reuse is an optimisation)."""
        for record, members in records:
            try:
                sha = self._members_sha(record.layer)
                if sha is None and members is not None:
                    _write(self.members_path(record.layer), members)
                    sha = members.split(b"\n", 2)[1].decode()
                if sha is not None:
                    _write(self.path(record.layer, record.compression, record.codec), encode(record, sha))
            except (OSError, BadRecord) as err:
                log.warning("could not write the reuse record of %s: %s", record.layer, err)

    def _members_sha(self, layer: str) -> str | None:
        """The digest of the sound members file of ``layer`` (checked, not parsed), None when there is none."""
        try:
            raw = _read(self.members_path(layer))
            head = len(MEMBERS_MAGIC) + 65
            sha = raw[len(MEMBERS_MAGIC):head - 1].decode("ascii")
            if raw.startswith(MEMBERS_MAGIC) and hashlib.sha256(raw[head:]).hexdigest() == sha:
                return sha
        except (OSError, BadRecord, UnicodeDecodeError):
            pass
        return None

    def forget_members(self) -> None:
        """Let the members read so far go (they are only needed to index the layers)."""
        self._members.clear()

    def drop_artifact(self, records: Iterable[Record], artifact_path: str) -> None:
        """Remove the given records that point at ``artifact_path`` (it was found changed or damaged)."""
        for record in records:
            if str(self.artifacts / record.artifact) == artifact_path:
                self.path(record.layer, record.compression, record.codec).unlink(missing_ok=True)


def _read(path: Path) -> bytes:
    with path.open("rb") as f:
        raw = f.read(MAX_RECORD + 1)
    if len(raw) > MAX_RECORD:
        raise BadRecord(f"{path.name} is too large")
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
