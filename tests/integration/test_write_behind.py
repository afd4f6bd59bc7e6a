"""A .sqsh artifact is sent to the disk as it is written, so the store's fsync at publish has little left to wait
for (on ext4 a reconversion's copied gigabytes otherwise all wait for it): every byte of its data, copied or
compressed, is handed to :func:`buildkit.fs.files.start_writeback`; so is a SIF's, whose squashfs is written once,
at its place in the SIF (there is no scratch copy left to keep off the disk)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from buildkit.fs import files as fsutil
from buildkit.image.convert import convert
from buildkit.image.squashfs import blocks as squashfs_blocks
from buildkit.image.squashfs import copy as squashfs_copy
from buildkit.storage.store import Store
from tests.integration.test_convert_incremental import BASE, _archive, _top

STEP = 4096  # the writer's write-behind step here (32 MiB by default: more than this test's images)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    calls: list[tuple[int, int]] = []

    def record(fd: int, offset: int, size: int) -> None:
        calls.append((offset, size))
        fsutil.start_writeback(fd, offset, size)

    monkeypatch.setattr(squashfs_blocks, "start_writeback", record)
    monkeypatch.setattr(squashfs_copy, "start_writeback", record)
    monkeypatch.setattr(squashfs_blocks, "WRITE_BEHIND", STEP)
    return calls


def _uncovered(calls: list[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    """The gaps the calls leave in [96, end)."""
    gaps, at = [], 96
    for offset, size in sorted(calls):
        if offset > at:
            gaps.append((at, offset))
        at = max(at, offset + size)
    return gaps + ([(at, end)] if at < end else [])


def _data_end(path: Path) -> int:
    """Where the squashfs's data ends: its inode table starts there."""
    with path.open("rb") as f:
        return struct.unpack_from("<Q", f.read(96), 64)[0]


def test_a_sqsh_is_sent_to_disk_as_it_is_written_and_copied(sent: list[tuple[int, int]], tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    cold = convert(_archive(tmp_path / "before.tar", [*BASE, _top("a")]), "sqsh", store=store)
    gaps = _uncovered(sent, _data_end(cold.path))
    assert len(gaps) <= 1 and all(b - a < STEP for a, b in gaps)  # at most the tail since the last step
    sent.clear()
    warm = convert(_archive(tmp_path / "now.tar", [*BASE, _top("b")]), "sqsh", store=store)
    assert warm.reused_bytes > 0
    copied = [call for call in sent if call[1] > 0]
    assert copied  # the placed copies were sent as they were made
    gaps = _uncovered(sent, _data_end(warm.path))
    assert len(gaps) <= 1 and all(b - a < STEP for a, b in gaps)


def test_a_sifs_squashfs_is_sent_to_disk_where_it_lies_in_the_sif(sent: list[tuple[int, int]],
                                                                   tmp_path: Path) -> None:
    from buildkit.image.sif.read import read_sif

    store = Store(tmp_path / "store")
    for name, top in (("before", "a"), ("now", "b")):
        sent.clear()
        made = convert(_archive(tmp_path / f"{name}.tar", [*BASE, _top(top)]), "sif", store=store)
        partition = read_sif(made.path).primary_partition()
        assert partition is not None and sent
        start, end = partition.offset, partition.offset + partition.size
        assert all(start <= offset and offset + size <= end for offset, size in sent), (start, end, sent)


def test_start_writeback_takes_a_real_file_and_any_range(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(os.urandom(1 << 20))
    fd = os.open(path, os.O_RDWR)
    try:
        fsutil.start_writeback(fd, 0, 1 << 20)
        fsutil.start_writeback(fd, 1 << 30, 4096)  # past the end: nothing to send, no error
        fsutil.start_writeback(fd, 0, 0)
    finally:
        os.close(fd)
    assert fsutil._sync_file_range() is not None  # Linux: the call exists, so the head start is real
