"""Atomic artifacts: write next to the destination, verify, then rename into place; copies between files.

An interrupted or failed write never leaves a file at the final path. Every
writer of a user-visible file goes through :func:`atomic_path`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


@contextmanager
def atomic_path(
    final: Path,
    *,
    mode: int = 0o644,
    suffix: str = ".part",
    verify: Callable[[Path], None] | None = None,
) -> Iterator[Path]:
    """Yield a temporary path (mode 0600) in ``final``'s folder; when the block succeeds, fsync it, ``verify``
    it, set ``mode`` and rename it to ``final``.

    On any exception (KeyboardInterrupt included) the temporary file is removed and ``final`` is untouched.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix, dir=final.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        if verify is not None:
            verify(tmp)
        tmp.chmod(mode)
        os.replace(tmp, final)
        fsync_dir(final.parent)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(final: Path, data: bytes, *, mode: int = 0o644) -> None:
    with atomic_path(final, mode=mode) as tmp:
        tmp.write_bytes(data)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


ALIGN = 4096  # file system block: a copy between equally aligned offsets can share the blocks (a reflink)


def copy_range(src: int, src_at: int, dst: int, dst_at: int, size: int) -> None:
    """``size`` bytes from ``src`` to ``dst`` in the kernel (``copy_file_range``). When both offsets are equally
    aligned, the whole blocks go in a call of their own, which XFS, btrfs and ZFS turn into shared extents (no
    data written); ext4 copies them in the kernel. Through memory when the kernel cannot copy between them."""
    head = min(size, -src_at % ALIGN) if src_at % ALIGN == dst_at % ALIGN else size
    middle = (size - head) // ALIGN * ALIGN
    for at, n in ((0, head), (head, middle), (head + middle, size - head - middle)):
        while n:
            try:
                done = os.copy_file_range(src, dst, n, src_at + at, dst_at + at)
            except OSError:  # another file system, or no support: copy through memory
                data = os.pread(src, min(n, 8 << 20), src_at + at)
                done = len(data)
                view = memoryview(data)
                while view:
                    view = view[os.pwrite(dst, view, dst_at + at + done - len(view)):]
            if done <= 0:
                raise OSError(f"the source ended {n} bytes early while it was copied")
            at, n = at + done, n - done


def copy_into(path: Path | str, out: BinaryIO) -> int | None:
    """The file at ``path`` appended to the open file ``out`` in the kernel (:func:`copy_range`); its size, or
    None when ``out`` is not a file (then the caller copies through memory)."""
    try:
        target = out.fileno()
    except (OSError, ValueError):  # a stream without a file
        return None
    out.flush()
    with open(path, "rb") as src:
        size = os.fstat(src.fileno()).st_size
        copy_range(src.fileno(), 0, target, out.tell(), size)
    out.seek(size, os.SEEK_CUR)
    return size
