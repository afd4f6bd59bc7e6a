"""A streamed layer's headers are read while its spool grows; the members count only for the verified spool."""

from __future__ import annotations

import io
import os
import tarfile
import threading
from pathlib import Path

import pytest

from buildkit.errors import ConvertError
from buildkit.image.layers.columns import FOLDED_PAX, Columns
from buildkit.image.layers.flatten import Tree
from buildkit.image.layers.growing import Growing
from buildkit.image.layers.headerscan import HeaderScan, members
from buildkit.image.layers.layerfile import LayerTar
from buildkit.image.layers.tarscan import scan


def layer_tar() -> bytes:
    """Long names, PAX records, links, directories: what a real layer's headers hold."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for n in range(40):
            info = tarfile.TarInfo(f"usr/lib/{'deep/' * (n % 30)}file-{n}-ü")
            data = os.urandom(n * 3000)
            info.size, info.mtime = len(data), 1_700_000_000.5
            info.pax_headers = {"SCHILY.xattr.user.n": str(n)}
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("usr/bin/link")
        link.type, link.linkname = tarfile.SYMTYPE, "../lib/file-0-ü"
        tar.addfile(link)
    return out.getvalue()


def with_pax(records: dict[str, str]) -> bytes:
    """A tar whose one member has a PAX extended header of about 1 KB (``records``)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("a")
        info.pax_headers = records
        tar.addfile(info)
    return out.getvalue()


def stream(data: bytes, spool: Path, growing: Growing, ok: bool = True, step: int = 4096) -> None:
    """Write ``data`` into ``spool`` in steps smaller than a header and its data, as a download does."""
    with spool.open("wb", buffering=0) as out:
        for at in range(0, len(data), step):
            out.write(data[at:at + step])
            growing.advance(len(data[at:at + step]))
    growing.finish(ok)


def follow(data: bytes, spool: Path, ok: bool = True) -> HeaderScan:
    growing = Growing()
    scanner = HeaderScan(spool, growing, "layer 1")
    writer = threading.Thread(target=stream, args=(data, spool, growing, ok))
    writer.start()
    writer.join()
    return scanner


def fields(found: list) -> list[tuple]:  # type: ignore[type-arg]
    """What the index uses of each member (a record keeps no header offsets, nor the PAX records that are fields)."""
    return [(m.name, m.type, m.mode, m.uid, m.gid, m.mtime, m.size, m.linkname, m.offset_data,
             {k: v for k, v in m.pax_headers.items() if k not in FOLDED_PAX}) for m in found]


def test_the_members_read_while_the_spool_grows_are_those_of_the_complete_spool(tmp_path: Path) -> None:
    data, spool = layer_tar(), tmp_path / "layer-1.tar"
    scanner = follow(data, spool)
    tar = LayerTar(spool, 0, len(data), "layer 1")
    got = scanner.columns(tar)
    assert got is not None
    with spool.open("rb") as f:
        assert fields(list(members(got))) == fields(list(scan(f, 0, len(data), "layer 1")))
    streamed, whole, kept = Tree(), Tree(), Columns()
    streamed.add_layer(tar, scanned=members(got))
    whole.add_layer(tar, kept)
    assert got.encode() == kept.encode()  # the layer's record too
    assert repr(streamed.nodes) == repr(whole.nodes) and streamed.data == whole.data  # inodes compare by identity


def test_members_count_only_for_the_spool_that_was_followed(tmp_path: Path) -> None:
    """An engine's layer whose stream failed comes from the engine's save instead: another file."""
    data, spool = layer_tar(), tmp_path / "layer-1.tar"
    scanner = follow(data, spool)
    assert scanner.columns(LayerTar(tmp_path / "saved.tar", 0, len(data), "layer 1")) is None


def test_a_failed_stream_gives_no_members(tmp_path: Path) -> None:
    spool = tmp_path / "layer-1.tar"
    scanner = follow(layer_tar(), spool, ok=False)
    assert scanner.columns(LayerTar(spool, 0, spool.stat().st_size, "layer 1")) is None


def test_an_empty_layer_has_no_members(tmp_path: Path) -> None:
    spool = tmp_path / "layer-1.tar"
    scanner = follow(b"", spool)
    got = scanner.columns(LayerTar(spool, 0, 0, "layer 1"))
    assert got is not None and list(members(got)) == []


def test_a_stream_that_ends_inside_an_extended_header_is_refused_as_the_complete_spool_is(tmp_path: Path) -> None:
    """The scan gives nothing, and the spool's headers read again give the error they always gave."""
    data = with_pax({"path": "x" * 300, "SCHILY.xattr.user.a": "b" * 600})[:512 + 700]  # 700 bytes of ~1 KB
    spool = tmp_path / "layer-1.tar"
    scanner = follow(data, spool)
    tar = LayerTar(spool, 0, len(data), "layer 1")
    assert scanner.columns(tar) is None
    with pytest.raises(ConvertError, match="an extended header of .* bytes does not fit"):
        Tree().add_layer(tar)


def test_an_extended_header_past_the_end_of_the_file_is_refused(tmp_path: Path) -> None:
    """A range that says more than the file holds: the header's bytes are not all there."""
    path = tmp_path / "short.tar"
    path.write_bytes(with_pax({"SCHILY.xattr.user.a": "b" * 600})[:512 + 300])
    with path.open("rb") as f, pytest.raises(ConvertError, match="does not fit"):
        list(scan(f, 0, 1 << 20, "layer 1"))


def test_headers_without_data_are_read_as_they_arrive(tmp_path: Path) -> None:
    """A spool that has its headers but not yet its end: the scan has them before the stream ends."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for n in range(5):
            info = tarfile.TarInfo(f"d{n}")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
    data = out.getvalue()
    spool, growing = tmp_path / "layer-1.tar", Growing()
    scanner = HeaderScan(spool, growing, "layer 1")
    with spool.open("wb", buffering=0) as out:
        out.write(data)
        growing.advance(len(data))
        scanner._thread.join(30)  # noqa: SLF001 - the zero blocks end the tar: done before the stream is
        assert not scanner._thread.is_alive()  # noqa: SLF001
    growing.finish(True)
    got = scanner.columns(LayerTar(spool, 0, len(data), "layer 1"))
    assert got is not None and [m.name for m in members(got)] == [f"d{n}" for n in range(5)]


def test_a_sparse_member_is_refused_as_from_the_complete_spool(tmp_path: Path) -> None:
    """A layer's columns cannot say a member is sparse: such a layer's headers are read again, and refused."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("holes")
        info.size = 512
        tar.addfile(info, io.BytesIO(bytes(512)))
    block = bytearray(out.getvalue())
    block[156:157], block[148:156] = tarfile.GNUTYPE_SPARSE, b" " * 8
    block[148:156] = f"{sum(block[:512]):06o}".encode() + b"\0 "  # a GNU sparse header, its checksum right
    spool = tmp_path / "layer-1.tar"
    scanner = follow(bytes(block), spool)
    tar = LayerTar(spool, 0, len(block), "layer 1")
    assert scanner.columns(tar) is None
    with pytest.raises(ConvertError, match="sparse"):
        Tree().add_layer(tar)


def test_a_stream_that_fails_before_it_begins_leaves_no_scan_waiting(tmp_path: Path) -> None:
    """A download refused at its first request never says the stream ended: the end of the reading phase stops the
    scan, also when there is no precompressor (targets of two codecs)."""
    from buildkit.errors import RegistryError
    from buildkit.image.reading import LayerReader
    from buildkit.image.sources.base import LayerBlob

    def refused():  # type: ignore[no-untyped-def]
        raise RegistryError("layer 1: 404 BLOB_UNKNOWN")
        yield b""

    blob = LayerBlob(tmp_path / "none", 0, 100, "layer 1", digest="sha256:" + "0" * 64, chunks=refused)
    layers = LayerReader([blob], tmp_path, lambda n: None, make=None)
    with pytest.raises(RegistryError), layers.preparing([0]) as ready:
        ready(0)
    (scan,) = layers._scans.values()  # noqa: SLF001
    assert layers.precompressed() == {}
    scan._thread.join(30)  # noqa: SLF001
    assert not scan._thread.is_alive()  # noqa: SLF001


def test_the_files_are_given_as_their_headers_are_read_and_end_with_the_scan(tmp_path: Path) -> None:
    """The precompressor's files come from the one reading of the headers: regular files with data, in tar
    order, each as soon as its header is read (while the spool still grows), the last when the scan ends."""
    data, spool, growing = layer_tar(), tmp_path / "layer-1.tar", Growing()
    scanner = HeaderScan(spool, growing, "layer 1")
    got: list[tuple[int, int]] = []
    reader = threading.Thread(target=lambda: got.extend(scanner.files()))
    reader.start()
    stream(data, spool, growing, step=1000)
    reader.join(30)
    assert not reader.is_alive()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert got == [(m.offset_data, m.size) for m in tar if m.isreg() and m.size]
    assert len(got) == 39  # file-0 is empty, the symlink has no data


def test_the_files_end_when_the_stream_is_stopped(tmp_path: Path) -> None:
    spool, growing = tmp_path / "layer-1.tar", Growing()
    scanner = HeaderScan(spool, growing, "layer 1")
    reader = threading.Thread(target=lambda: list(scanner.files()))
    reader.start()
    growing.stop()  # nothing arrived: the writer starts and does the rest itself
    reader.join(30)
    assert not reader.is_alive()
