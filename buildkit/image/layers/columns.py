"""A layer's members column by column: how the header pass keeps them (:class:`Columns`, a few dozen bytes per
member) and the layer's members file, which a reuse record refers to (:mod:`..squashfs.reuse`): zstd-compressed
JSON, names as JSON strings and the numbers as little-endian arrays, framed with its digest
(:mod:`buildkit.storage.reuse_files`)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import json
import sys
from array import array
from typing import Any

from ...storage import reuse_files as files
from .tarscan import Member

MAX_RECORD = 128 << 20  # a layer with a million files has a members file of a few tens of MB
FOLDED_PAX = ("path", "linkpath", "size", "uid", "gid", "mtime")  # already in the member's fields
COUNTS = ("mode", "uid", "gid", "size", "offset")


class MalformedBody(ValueError):
    pass


class BadRecord(Exception):  # noqa: N818 - internal: the record is dropped, never reported
    pass



def unpacked(packed: bytes, limit: int) -> bytes:
    """A zstd frame's content, at most ``limit`` bytes read whatever its header claims (else MalformedBody)."""
    import zstandard

    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(packed), read_across_frames=False) as reader:
            raw = reader.read(limit + 1)
    except zstandard.ZstdError as err:
        raise MalformedBody(f"malformed: {err}") from err
    if len(raw) > limit:
        raise MalformedBody("a body larger than any record's")
    return raw


def _packed_json(body: dict[str, Any] | bytes) -> bytes:
    import zstandard

    text = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
    return zstandard.ZstdCompressor(level=3).compress(text)


def _unpacked_json(packed: bytes) -> Any:
    try:  # bounded: a frame's header may claim any size
        return json.loads(unpacked(packed, 8 * MAX_RECORD))
    except ValueError as err:
        raise BadRecord(f"malformed: {err}") from err


def _framed_members(body: dict[str, Any] | bytes) -> bytes:
    packed = _packed_json(body)
    return files.MEMBERS_MAGIC + hashlib.sha256(packed).hexdigest().encode() + b"\n" + packed


def checked_members(raw: bytes) -> tuple[str, int]:
    """(the body's sha256, where the body starts) of a members file, its digest checked."""
    try:
        sha, start = files.members_head(raw)
    except ValueError as err:
        raise BadRecord(str(err)) from err
    if hashlib.sha256(raw[start:]).hexdigest() != sha:
        raise BadRecord("digest mismatch")
    return sha, start


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
        return _framed_members(b'{"name":[' + self.names[:-1] + b'],"link":[' + self.links[:-1] + b"],"
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
    sha, start = checked_members(raw)
    body = _unpacked_json(raw[start:])
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
