"""Compression parsing and site-aware choice; superblock checks on crafted bytes."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from buildkit.errors import ConfigError, ConvertError
from buildkit.image.squashfs.compression import choose, parse_compression
from buildkit.image.squashfs.superblock import check


@pytest.mark.parametrize("text, label", [
    ("zstd", "zstd:1"), ("zstd:19", "zstd:19"), ("gzip", "gzip:1"), ("GZIP:9", "gzip:9"), ("xz", "xz:0"),
    (" xz:6 ", "xz:6"), ("zstd:-3", "zstd:-3"), ("zstd:-7", "zstd:-7"), ("lz4", "lz4:1"), ("lz4:9", "lz4:9"),
])
def test_parse(text: str, label: str) -> None:
    assert parse_compression(text).label == label


@pytest.mark.parametrize("text, message", [
    ("brotli", "unknown algorithm 'brotli'"), ("gzip:0", "level must be 1..9"), ("zstd:x", "level must be -7..-1 or 1..22"),
    ("zstd:-8", "level must be -7..-1 or 1..22"), ("zstd:0", "level must be -7..-1 or 1..22"),
    ("zstd:--1", "level must be"), ("gzip:-1", "level must be 1..9"),
    ("lz4:0", "level must be 1..12"), ("lzo:5", "ckit does not write lzo"),
])
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_compression(text)


def test_default_is_fast_never_gzip_9() -> None:
    assert choose(None).label == "gzip:1"  # a .sif for no site in particular: what every Singularity reads
    assert choose(None, target="sif").label == "gzip:1"
    assert choose(None, ("gzip", "xz", "zstd"), target="sif").label == "zstd:1"  # a site that reads zstd
    assert choose("zstd", target="sif").label == "zstd:1"  # asked for
    assert choose(None, target="sqsh").label == "zstd:-3"
    assert choose(None, ("gzip", "xz", "lzo"), site_name="twnia2").label == "gzip:1"
    assert choose(None, ("gzip", "xz", "lzo"), target="sqsh", site_name="twnia2").label == "gzip:1"
    assert choose(None, ("lz4", "xz")).label == "xz:0"
    assert choose(None, target="sqsh", squashfuse=True).label == "lz4:1"  # read through squashfuse: see SQUASHFUSE
    assert choose(None, ("gzip",), target="sqsh", squashfuse=True).label == "gzip:1"
    assert choose(None, target="sif", squashfuse=True).label == "gzip:1"
    assert choose("gzip:9", ("gzip",)).label == "gzip:9"  # only when asked for


def test_site_refuses_what_it_cannot_mount() -> None:
    with pytest.raises(ConfigError, match="site twnia2 cannot mount zstd") as err:
        choose("zstd:3", ("gzip", "xz", "lzo"), site_name="twnia2")
    assert err.value.hint == "the site's runtime mounts: gzip, xz, lzo"


def test_a_site_that_mounts_only_what_ckit_does_not_write_gets_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="site old: none of its squashfs compressions") as err:
        choose(None, ("lzma", "lzo"), site_name="old")
    assert "does not write lzo or lzma" in err.value.hint


def superblock(comp_id: int = 6, bytes_used: int = 4096, major: int = 4) -> bytes:
    head = b"hsqs" + struct.pack("<IIIIHHHHHH", 10, 0, 131072, 1, comp_id, 17, 0, 1, major, 0)
    return head + struct.pack("<QQ", 0, bytes_used) + b"\0" * (96 - len(head) - 16)


def test_superblock_check(tmp_path: Path) -> None:
    good = tmp_path / "good.sqsh"
    good.write_bytes(superblock().ljust(4096, b"\0"))
    sb = check(good)
    assert (sb.compression, sb.block_size, sb.inodes, sb.bytes_used) == ("zstd", 131072, 10, 4096)
    embedded = tmp_path / "embedded"
    embedded.write_bytes(b"x" * 100 + superblock(comp_id=1).ljust(4096, b"\0"))
    assert check(embedded, 100).compression == "gzip"
    truncated = tmp_path / "short.sqsh"
    truncated.write_bytes(superblock(bytes_used=10_000).ljust(4096, b"\0"))
    with pytest.raises(ConvertError, match="truncated"):
        check(truncated)
    for name, data in (("magic", b"nope" * 30), ("version", superblock(major=3)), ("comp", superblock(comp_id=9))):
        bad = tmp_path / name
        bad.write_bytes(data.ljust(4096, b"\0"))
        with pytest.raises(ConvertError):
            check(bad)
