"""A fast reader of tar *headers* (pass 1 of the flattener): seek from header to header, never read data.

It understands what container layers contain: ustar/GNU/PAX headers, PAX extended records (long names,
xattrs, large sizes and ids, fractional mtimes), GNU long names/links, and base-256 numbers. It is about
four times faster than ``tarfile`` for this job, which matters for images with many small files. Sparse
members are reported as such (the flattener refuses them); a bad header checksum is an error.
"""

from __future__ import annotations

import math
import os
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from ...config import limits
from ...errors import ConvertError
from ...outside import ascii_int

BLOCK = 512
ZERO = bytes(BLOCK)
# What a member's numbers may be: a mode the 8-byte octal field holds (base-256 can say -1 or 2**56), ids of
# 32 bits (uid_t; squashfs and every runtime hold no more), a size a file offset can reach.
RANGES = (("mode", 0o7777777), ("uid", (1 << 32) - 1), ("gid", (1 << 32) - 1), ("size", (1 << 63) - 1))
DATA_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
KNOWN = frozenset((*DATA_TYPES, tarfile.LNKTYPE, tarfile.SYMTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE,
                   tarfile.DIRTYPE, tarfile.FIFOTYPE))


@dataclass(slots=True)
class Member:
    """The header fields the flattener needs; offsets are absolute positions in the file."""

    name: str
    type: bytes
    mode: int
    uid: int
    gid: int
    mtime: float
    size: int
    linkname: str
    offset: int
    offset_data: int
    pax_headers: dict[str, str] = field(default_factory=dict)
    sparse: bool = False

    def isreg(self) -> bool:
        return self.type in DATA_TYPES

    def isdir(self) -> bool:
        return self.type == tarfile.DIRTYPE


def _str(raw: bytes) -> str:
    end = raw.find(b"\0")
    return (raw if end < 0 else raw[:end]).decode("utf-8", "surrogateescape")


def _num(raw: bytes) -> int:
    """A numeric header field: octal text, or GNU base-256 (a negative value comes back negative)."""
    if raw[:1] in (b"\x80", b"\xff"):  # base-256 (GNU)
        value = int.from_bytes(raw[1:], "big")
        return value - (1 << (8 * (len(raw) - 1))) if raw[0] == 0xFF else value
    try:
        return int(raw.rstrip(b"\0 ") or b"0", 8)  # the usual "0000644\0"
    except ValueError:
        text = raw.split(b"\0", 1)[0].strip(b" ")  # a NUL-terminated field with junk after it
        return int(text, 8) if text else 0


def _pax(data: bytes, what: str) -> dict[str, str]:
    """PAX records ``LENGTH KEY=VALUE\n``; anything else is a malformed header (never a loop or a crash)."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos:pos + 1] != b"\0":
        space = data.find(b" ", pos, pos + 21)
        digits = data[pos:space] if space > pos else b""
        length = int(digits) if digits.isdigit() else 0
        if length <= space - pos + 1 or pos + length > len(data) or data[pos + length - 1] != 0x0A:
            raise ConvertError(f"{what}: malformed PAX header record at byte {pos}",
                               hint="the layer is corrupt or hostile; it was not converted")
        record = data[space + 1: pos + length - 1]  # without the trailing newline
        key, _, value = record.partition(b"=")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def _pax_int(headers: dict[str, str], key: str, default: int, what: str, name: str) -> int:
    text = headers.get(key)
    if text is None or text == "":
        return default
    value = ascii_int(text) if len(text) <= 20 else None  # str.isdigit() takes '٣' and '²' (int() refuses '²')
    if value is None:
        raise ConvertError(f"{what}: {name}: PAX {key}={text[:40]!r} is not a non-negative whole number",
                           hint="the layer is corrupt or hostile; it was not converted")
    return value


def _pax_time(headers: dict[str, str], default: float, what: str, name: str) -> float:
    text = headers.get("mtime")
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or len(text) > 40:
        raise ConvertError(f"{what}: {name}: PAX mtime={text[:40]!r} is not a time",
                           hint="the layer is corrupt or hostile; it was not converted")
    return value


def _header_numbers(buf: bytes, at: int, what: str) -> tuple[int, int, int, int, int]:
    """mode, uid, gid, size, mtime of a header whose checksum holds; sizes and ids are never negative."""
    try:
        valid = _checksum_ok(buf)
    except ValueError:
        valid = False
    if not valid:
        raise ConvertError(f"{what}: bad tar header checksum at byte {at}", hint="the layer is corrupt or not a tar")
    try:
        mode, uid, gid, size, mtime = _numbers(buf)
    except ValueError:
        raise _bad(what, at, "a numeric field of the header is not a number") from None
    if size < 0:  # it would move the scan backwards, for ever (the other numbers are checked with the name)
        raise _bad(what, at, f"negative size ({size})")
    return mode, uid, gid, size, mtime


def _check_numbers(what: str, name: str, at: int, numbers: tuple[int, int, int, int]) -> None:
    """A member's mode, uid, gid and size (from the header or its PAX records) are in :data:`RANGES`."""
    for (field_name, top), value in zip(RANGES, numbers, strict=True):
        if not 0 <= value <= top:
            raise ConvertError(f"{what}: {name!r}: {field_name} {value} is out of range (0 to {top}; tar header at "
                               f"byte {at})", hint="the layer is corrupt or hostile; it was not converted")


def _bad(what: str, at: int, why: str) -> ConvertError:
    return ConvertError(f"{what}: {why} (tar header at byte {at})",
                        hint="the layer is corrupt, truncated or hostile; it was not converted")


NUL_TO_SPACE = bytes.maketrans(b"\0", b" ")


def _numbers(buf: bytes) -> tuple[int, int, int, int, int]:
    """mode, uid, gid, size, mtime: plain octal fields in one go (the usual case), else field by field."""
    fields = buf[100:148].translate(NUL_TO_SPACE)
    try:
        return (int(fields[0:8], 8), int(fields[8:16], 8), int(fields[16:24], 8), int(fields[24:36], 8),
                int(fields[36:48], 8))
    except ValueError:  # base-256, an empty field, junk after the NUL
        return (_num(buf[100:108]), _num(buf[108:116]), _num(buf[116:124]), _num(buf[124:136]),
                _num(buf[136:148]))


def _checksum_ok(buf: bytes) -> bool:
    """The header checksum: the byte sum with the checksum field counted as spaces. adler32's low half is
    1 + the byte sum mod 65521, computed in C; a 512-byte block sums to less than 2 × 65521, so the sum is
    one of two values and the stored checksum must be the one that fits."""
    field = buf[148:156]
    try:
        expected = int(field.translate(NUL_TO_SPACE), 8)
    except ValueError:
        expected = _num(field)
    total = (zlib.adler32(buf) & 0xFFFF) - 1 - sum(field) + 256  # ≡ the checksum, mod 65521
    return expected in (total % 65521, total % 65521 + 65521)


def _names(buf: bytes, long_name: str | None, long_link: str | None) -> tuple[str, str]:
    """A member's name and link target: its header's, unless a GNU long name or long link came before it."""
    name = _str(buf[0:100])
    if buf[257:263] == b"ustar\0" and buf[345:346] != b"\0":  # POSIX prefix (GNU puts times there)
        name = _str(buf[345:500]) + "/" + name
    linkname = long_link if long_link is not None else _str(buf[157:257]) if buf[157] else ""
    return (long_name if long_name is not None else name), linkname


META_TYPES = (tarfile.XHDTYPE, b"X", tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)


def _padded(size: int) -> int:
    return (size + BLOCK - 1) // BLOCK * BLOCK


@dataclass
class _Extended:
    """What the extended headers before a member say about it: PAX records (global ones until replaced), a GNU
    long name or long link."""

    global_pax: dict[str, str] = field(default_factory=dict)  # replaced, never mutated: members may share it
    pax: dict[str, str] | None = None
    long_name: str | None = None
    long_link: str | None = None

    def add(self, kind: bytes, data: bytes, what: str) -> None:
        if kind == tarfile.XGLTYPE:
            self.global_pax = {**self.global_pax, **_pax(data, what)}
        elif kind in (tarfile.XHDTYPE, b"X"):
            self.pax = _pax(data, what)
        elif kind == tarfile.GNUTYPE_LONGNAME:
            self.long_name = _str(data)
        else:
            self.long_link = _str(data)

    def headers(self) -> dict[str, str]:
        return {**self.global_pax, **self.pax} if self.global_pax and self.pax else (self.pax or self.global_pax)

    def used(self) -> None:
        """A member took them: the next one starts with the global records only."""
        self.pax, self.long_name, self.long_link = None, None, None


def _member(buf: bytes, kind: bytes, header_at: int, at: int, extended: _Extended, what: str) -> Member:
    """The member whose header is ``buf`` (at ``header_at`` of the file, ``at`` of the layer), its fields
    overridden by the extended headers before it."""
    mode, uid, gid, size, seconds = _header_numbers(buf, at, what)
    mtime: float = seconds  # whole seconds in the header, fractional in PAX
    name, linkname = _names(buf, extended.long_name, extended.long_link)
    headers = extended.headers()
    if headers:  # PAX records override the header fields
        name, linkname = headers.get("path", name), headers.get("linkpath", linkname)
        uid, gid = _pax_int(headers, "uid", uid, what, name), _pax_int(headers, "gid", gid, what, name)
        mtime = _pax_time(headers, mtime, what, name)
        size = _pax_int(headers, "size", size, what, name) if "size" in headers else size
    _check_numbers(what, name, at, (mode, uid, gid, size))
    return Member(
        name=name.rstrip("/") or name if kind == tarfile.DIRTYPE else name,
        type=kind, mode=mode, uid=uid, gid=gid, mtime=mtime, size=size, linkname=linkname,
        offset=header_at, offset_data=header_at + BLOCK, pax_headers=headers,
        sparse=kind == tarfile.GNUTYPE_SPARSE or bool(headers) and any(k.startswith("GNU.sparse.") for k in headers),
    )


def scan(f: BinaryIO, start: int, end: int, what: str,
         pread: Callable[[int, int, int], bytes] = os.pread) -> Iterator[Member]:
    """Every member of the tar at ``[start, end)`` of ``f`` (a file with a descriptor: headers are pread, through
    ``pread`` when given: a file still being written waits there for its bytes)."""
    pos, fd, extended = start, f.fileno(), _Extended()
    max_meta = limits.size("tar_header_size")
    while pos < end:  # every pass moves pos forward by at least one block
        buf = pread(fd, BLOCK, pos) if pos + BLOCK <= end else b""  # one syscall per header: no seek
        if buf == ZERO:
            return
        if len(buf) < BLOCK:
            if pread(fd, end - pos, pos).strip(b"\0"):
                raise _bad(what, pos - start, "the layer ends inside a tar header (truncated)")
            return
        kind, data_at = buf[156:157] or tarfile.REGTYPE, pos + BLOCK
        if kind in META_TYPES:
            size = _header_numbers(buf, pos - start, what)[3]
            data = pread(fd, size, data_at) if size <= max_meta and data_at + size <= end else b""
            if len(data) < size:  # too large, past the range, or past the end of the file or of a stream
                raise _bad(what, pos - start, f"an extended header of {size} bytes does not fit")
            extended.add(kind, data, what)
            pos = data_at + _padded(size)
            continue
        member = _member(buf, kind, pos, pos - start, extended, what)
        extended.used()
        # only regular files (and types ckit does not know, to be skipped whole) carry data
        pos = data_at + (_padded(member.size) if kind in DATA_TYPES or kind not in KNOWN else 0)
        yield member
