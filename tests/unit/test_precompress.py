"""The precompressor follows a spool as it grows and compresses its large files exactly as the writer would."""

from __future__ import annotations

import io
import os
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from buildkit.image.layers.growing import Growing
from buildkit.image.layers.headerscan import HeaderScan
from buildkit.image.squashfs.blocks import BLOCK_SIZE, Run, crc32
from buildkit.image.squashfs.codec import compressor
from buildkit.image.squashfs.precompress import Precompressor


def layer_tar() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("small", b"x" * 100), ("big", os.urandom(3 * BLOCK_SIZE + 5)),
                           ("zeros", bytes(2 * BLOCK_SIZE))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def follow(spool: Path, growing: Growing, make: Callable[[], Callable[[bytes], bytes]]) -> Precompressor:
    """A precompressor fed, as in a conversion, by the layer's header scan."""
    return Precompressor(spool, growing, make, "layer 1", HeaderScan(spool, growing, "layer 1").files)


def stream(data: bytes, spool: Path, growing: Growing, ok: bool) -> threading.Thread:
    def write() -> None:
        with spool.open("wb", buffering=0) as out:
            for at in range(0, len(data), 50_000):  # in steps: the precompressor has to wait for bytes
                out.write(data[at:at + 50_000])
                growing.advance(len(data[at:at + 50_000]))
                time.sleep(0.005)
        growing.finish(ok)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_the_large_files_of_a_growing_spool_are_compressed_as_the_writer_would(tmp_path: Path) -> None:
    data, spool, growing = layer_tar(), tmp_path / "layer-1.tar", Growing()
    make = compressor("zstd", 3)
    pre = follow(spool, growing, make)
    stream(data, spool, growing, ok=True).join()
    pre._thread.join(30)  # the stream has ended: the precompressor finishes on its own  # noqa: SLF001
    path, segment = pre.result()  # type: ignore[misc]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar}
    assert set(segment.files) == {members["big"].offset_data, members["zeros"].offset_data}
    made = path.read_bytes()
    with spool.open("rb") as f:
        for name in ("big", "zeros"):
            m = members[name]
            packed = Run((f.fileno(), m.offset_data, m.size), name)(make())
            at, words, crc = segment.files[m.offset_data]
            assert words == tuple(word for _, word in packed)
            stored = b"".join(bytes(chunk) for chunk, word in packed if word)  # type: ignore[arg-type]
            assert made[at:at + len(stored)] == stored and crc32(stored) == crc
    assert segment.files[members["zeros"].offset_data][1] == (0, 0)  # holes, as the writer stores them


def test_a_failed_stream_gives_nothing(tmp_path: Path) -> None:
    spool, growing = tmp_path / "layer-1.tar", Growing()
    pre = follow(spool, growing, compressor("zstd", 3))
    stream(layer_tar(), spool, growing, ok=False).join()
    assert pre.result() is None


def test_stopping_a_precompressor_that_waits_for_bytes_returns_at_once(tmp_path: Path) -> None:
    spool, growing = tmp_path / "layer-1.tar", Growing()
    pre = follow(spool, growing, compressor("zstd", 3))
    began = time.monotonic()
    assert pre.result() is None  # nothing arrived yet
    assert time.monotonic() - began < 5


def test_small_files_are_packed_into_the_writers_fragment_groups(tmp_path: Path) -> None:
    """Files under a block are grouped as the writer groups them (greedily, in tar order) and each group is the
    block the writer's Fragment job makes of it; large files in between do not break a group."""
    from array import array

    from buildkit.image.squashfs.blocks import Fragment
    from buildkit.image.squashfs.data import fragment_groups

    out = io.BytesIO()
    sizes = [30_000, 50_000, 60_000, 3 * BLOCK_SIZE, 100_000, 20_000, 0, 120_000, 7]
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for n, size in enumerate(sizes):
            info = tarfile.TarInfo(f"f{n}")
            info.size = size
            tar.addfile(info, io.BytesIO(os.urandom(size // 2) + bytes(size - size // 2)))
    data, spool, growing = out.getvalue(), tmp_path / "layer-1.tar", Growing()
    make = compressor("zstd", 3)
    pre = follow(spool, growing, make)
    stream(data, spool, growing, ok=True).join()
    pre._thread.join(30)  # noqa: SLF001
    path, segment = pre.result()  # type: ignore[misc]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        listed = array("q", (v for m in tar if m.size for v in (m.offset_data, m.size)))
    groups = fragment_groups(listed)
    assert len(groups) == 4 and set(segment.groups) == set(range(len(groups)))
    made = path.read_bytes()
    with spool.open("rb") as f:
        for g, group in enumerate(groups):
            ((block, word),) = Fragment([(f.fileno(), o, n) for o, n in group], "layer 1")(make())
            at, got_word, crc, alive = segment.groups[g]
            assert (got_word, alive) == (word, tuple(range(len(group))))
            assert made[at:at + len(block)] == block and crc32(block) == crc
