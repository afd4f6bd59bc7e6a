"""The C allocator's share of a conversion's memory (glibc only; elsewhere these do nothing).

A conversion moves gigabytes through 1 MiB chunks and 128 KiB blocks in a dozen threads. glibc gives each thread
that allocates its own arena (up to eight per CPU) and keeps what was freed in each for reuse, so peak RSS grew
with the image: 181 MB for a 3.6 GB image, most of it free memory held by arenas of the download phase. Two
arenas serve these threads as fast (they mostly wait on zstd, zlib and I/O, which release the GIL but allocate
little), and returning the download phase's free memory before the writer starts keeps the peak at 128-140 MB.
A fixed mmap threshold would free every chunk at once but doubles the system time (page faults), so it is not set.
"""

from __future__ import annotations

import ctypes

M_ARENA_MAX = -8  # mallopt parameter numbers from glibc's malloc.h
ARENAS = 2


def _libc() -> ctypes.CDLL | None:
    """The process's own symbols (dlopen(NULL): no library search, no subprocess), if they are glibc's."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not hasattr(libc, "mallopt") or not hasattr(libc, "malloc_trim"):
        return None  # musl and others: their allocators behave otherwise, nothing to tune
    return libc


def limit_arenas() -> None:
    """Cap the number of malloc arenas (call before the conversion's threads start)."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(M_ARENA_MAX, ARENAS)


def trim() -> None:
    """Give the memory freed so far back to the system (between phases)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
