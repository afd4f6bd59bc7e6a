"""The allocator settings a conversion makes (buildkit.image.malloc): glibc's, here; harmless to repeat."""

from __future__ import annotations

from buildkit.image import malloc


def test_glibc_is_found_and_both_calls_succeed() -> None:
    libc = malloc._libc()
    assert libc is not None  # Debian's glibc: the settings take effect where the benchmarks measure them
    assert libc.mallopt(malloc.M_ARENA_MAX, malloc.ARENAS) == 1  # mallopt answers 1 when it took the value
    malloc.limit_arenas()
    malloc.trim()
    malloc.trim()  # between every phase of every conversion: repeating it changes nothing
