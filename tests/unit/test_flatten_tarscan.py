"""The fast header scanner reads what tarfile reads: ustar, GNU and PAX headers, long names, xattrs."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from buildkit.errors import ConvertError
from buildkit.image.layers.tarscan import scan

LONG = "deep/" * 30 + "file-with-a-long-name.txt"


def make(fmt: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        def add(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **attrs: object) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.size = kind, len(data)
            for key, value in attrs.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

        add("dir", tarfile.DIRTYPE, mode=0o755)
        add("dir/file", data=b"x" * 1000, mode=0o4755, uid=1000, gid=1000, mtime=1_700_000_000)
        add(LONG, data=b"long")
        add("link-" + "t" * 120, tarfile.SYMTYPE, linkname="target-" + "u" * 120)
        add("hard", tarfile.LNKTYPE, linkname="dir/file")
        add("big-ids", uid=3_000_000, gid=3_000_001, data=b"i")
        if fmt == tarfile.PAX_FORMAT:
            add("caps", data=b"c", pax_headers={"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"})
    return out.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_scan_matches_tarfile(tmp_path: Path, fmt: int) -> None:
    data = make(fmt)
    path = tmp_path / "layer.tar"
    path.write_bytes(b"PREFIX" * 100 + data)  # a layer inside a bigger file, as in a docker-archive
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        expected = [(m.name, m.type, m.mode, m.uid, m.gid, int(m.mtime), m.linkname, m.size if m.isreg() else 0,
                     m.offset_data + 600, m.pax_headers.get("SCHILY.xattr.security.capability")) for m in tar]
    with path.open("rb", buffering=0) as f:
        got = [(m.name, m.type, m.mode, m.uid, m.gid, int(m.mtime), m.linkname, m.size if m.isreg() else 0,
                m.offset_data, m.pax_headers.get("SCHILY.xattr.security.capability"))
               for m in scan(f, 600, 600 + len(data), "layer")]
    assert got == expected
    assert LONG in [g[0] for g in got]


def test_bad_checksum_is_an_error(tmp_path: Path) -> None:
    data = bytearray(make(tarfile.PAX_FORMAT))
    data[0] ^= 0x20
    path = tmp_path / "bad.tar"
    path.write_bytes(bytes(data))
    with path.open("rb", buffering=0) as f, pytest.raises(ConvertError, match="bad tar header checksum"):
        list(scan(f, 0, len(data), "layer 1"))


def test_old_style_and_empty_numeric_fields(tmp_path: Path) -> None:
    """Space-padded octal ("   644 ") and empty fields (old tars) read as tarfile reads them."""
    info = tarfile.TarInfo("old")
    info.size, info.mode, info.uid, info.mtime = 3, 0o644, 0, 1_600_000_000
    header = bytearray(info.tobuf(tarfile.USTAR_FORMAT))
    header[100:108] = b"   644 \0"
    header[108:116] = b"\0" * 8  # no uid at all
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    path = tmp_path / "old.tar"
    path.write_bytes(bytes(header) + b"abc".ljust(512, b"\0") + b"\0" * 1024)
    with tarfile.open(path) as tar:
        expected = [(m.name, m.mode, m.uid, m.size, int(m.mtime)) for m in tar]
    with path.open("rb", buffering=0) as f:
        got = [(m.name, m.mode, m.uid, m.size, int(m.mtime)) for m in scan(f, 0, path.stat().st_size, "layer")]
    assert got == expected == [("old", 0o644, 0, 3, 1_600_000_000)]
