"""The allocator call a conversion makes (buildkit.image.speed.malloc): glibc's, here; harmless to repeat."""

from __future__ import annotations

from buildkit.image.speed import malloc


def test_glibc_is_found_and_trimming_is_harmless_to_repeat() -> None:
    assert malloc._libc() is not None  # Debian's glibc: the call takes effect where the benchmarks measure it
    malloc.trim()
    malloc.trim()  # between the phases of every conversion: repeating it changes nothing
