"""Which speed mechanisms a conversion uses: one frozen object, made once at the conversion's entry and passed down.

None of them changes a byte of the output (``tests/unit/test_tuning.py`` converts the same image both ways and
compares the bytes); each buys time or memory, which ``make bench`` (``tests/bench/bench_tuning.py``) measures by
switching them off one at a time. ``CKIT_PLAIN=1`` converts the plain way (every mechanism off): to compare, to
debug, or to rule them out; ``CKIT_PLAIN=precompress,write_behind`` switches off just those named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from ...errors import ConfigError

ENV = "CKIT_PLAIN"


@dataclass(frozen=True)
class Tuning:
    """The mechanisms, all on by default (see each one's module for what it buys)."""

    share_cpus: bool = True  # the largest streamed layer keeps a CPU while it arrives (:mod:`.cpushare`)
    scan_headers: bool = True  # a streamed layer's tar headers read while it arrives (:mod:`..layers.headerscan`)
    precompress: bool = True  # a streamed layer's large files compressed while it arrives (needs the header scan)
    trim_memory: bool = True  # freed memory returned to the system between phases (:mod:`.malloc`)
    pause_gc: bool = True  # Python's cyclic collector paused while the index lives (:func:`..produce.produce`)
    write_behind: bool = True  # a .sqsh sent to the disk as it is written (:mod:`..squashfs.blocks`)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def plain(cls) -> Tuning:
        return cls(**dict.fromkeys(cls.names(), False))

    def without(self, *names: str) -> Tuning:
        """These mechanisms off, the others as they are."""
        return dataclasses.replace(self, **dict.fromkeys(names, False))

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Tuning:
        """``CKIT_PLAIN``: unset, empty or 0: every mechanism; 1: none; a comma-separated list: those off."""
        value = environ.get(ENV, "").strip()
        if value in ("", "0"):
            return cls()
        if value == "1":
            return cls.plain()
        names = [name.strip() for name in value.split(",") if name.strip()]
        unknown = [name for name in names if name not in cls.names()]
        if unknown:
            raise ConfigError(f"{ENV}={value!r}: no speed mechanism is called {', '.join(unknown)}",
                              hint=f"{ENV}=1 for none, or a list of: {','.join(cls.names())}")
        return cls().without(*names)


TUNED = Tuning()  # every mechanism (frozen: a shared default, never changed)
