"""The C allocator's share of a conversion's memory (glibc only; elsewhere this does nothing).

A conversion moves gigabytes through 1 MiB chunks and 128 KiB blocks in a dozen threads. glibc keeps what the
download phase freed in each thread's arena for reuse, so peak RSS grew with the image: 181 MB for a 3.6 GB
image, much of it free memory (25–40 MB at any time while layers download). It is returned before each layer
is merged into the index (the index grows on top of it) and before the writer starts. Two other
settings were measured and left out: capping the arenas at two (a few MB less, but +0.1 s of system time on a
170 MB image) and a fixed mmap threshold (frees every chunk at once, but doubles the system time: page faults).
"""

from __future__ import annotations

import ctypes


def _libc() -> ctypes.CDLL | None:
    """The process's own symbols (dlopen(NULL): no library search, no subprocess), if they are glibc's."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None  # musl and others: nothing to tune


def trim() -> None:
    """Give the memory freed so far back to the system (between phases)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
