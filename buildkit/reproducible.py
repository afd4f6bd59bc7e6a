"""``SOURCE_DATE_EPOCH`` (reproducible-builds.org): the one place ckit reads it.

Set, it dates everything ckit writes (squashfs superblock and added files, SIF header, labels, manifest
annotations) and makes those bytes reproducible; it is also part of the key of a stored conversion, so a store
filled without it never serves bytes made without it. Unset or empty, a squashfs superblock still says 0 (a .sqsh is reproducible anyway); the SIF header, labels and
annotations use the current time.
"""

from __future__ import annotations

import os

from .errors import ConfigError
from .outside import ascii_int


def source_date_epoch() -> int | None:
    """The value as whole seconds since 1970, None when unset or empty, a ConfigError (exit 2) otherwise."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not value:
        return None
    seconds = ascii_int(value)
    if seconds is None or seconds >= 1 << 32:
        raise ConfigError(f"SOURCE_DATE_EPOCH={value!r} is not a number of seconds since 1970",
                          hint="use e.g. SOURCE_DATE_EPOCH=$(git log -1 --format=%ct), or unset it")
    return seconds
