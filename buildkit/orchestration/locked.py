"""``ckit build --locked``: the lock file ``ckit lock`` wrote (:mod:`buildkit.registry.lock`), read back and
checked against the stack as it resolves now."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import jsondoc, limits
from ..errors import ConfigError
from ..fs.files import read_capped

LOCK_KEYS = ("lockVersion", "stack", "sets", "ngc", "fingerprint", "base")


def read_lock(path: Path, stack: str) -> dict[str, Any]:
    """The lock file ``ckit lock`` wrote (canonical JSON), checked to be for ``stack``."""
    where = str(path)
    try:
        data = jsondoc.parse(read_capped(path, limits.size("file_size"), "lock file"), "the content")
    except FileNotFoundError:
        raise ConfigError(f"--locked: {where} does not exist", hint=f"run `ckit lock {stack}` first") from None
    except (OSError, ConfigError) as err:
        raise ConfigError(f"--locked: {where} is not a ckit lock file: {err}",
                          hint=f"run `ckit lock {stack}` again") from None
    base = data.get("base") if isinstance(data, dict) else None
    missing = [k for k in LOCK_KEYS if not isinstance(data, dict) or k not in data]
    missing += [] if isinstance(base, dict) and "pinned" in base else ["base.pinned"]
    if missing or not isinstance(data, dict) or not isinstance(base, dict):  # (dicts when nothing is missing)
        raise ConfigError(f"--locked: {where} lacks {', '.join(missing)}", hint=f"run `ckit lock {stack}` again")
    version, locked_stack, pinned = data["lockVersion"], data["stack"], base["pinned"]
    if version != 1:
        raise ConfigError(f"--locked: {where} has lockVersion {version}; this ckit reads version 1",
                          hint=f"run `ckit lock {stack}` again")
    if locked_stack != stack:
        raise ConfigError(f"--locked: {where} pins stack {locked_stack}, not {stack}",
                          hint=f"use --lock-file with the lock of {stack}, or run `ckit lock {stack}`")
    if "@sha256:" not in str(pinned):
        raise ConfigError(f"--locked: {where}: base.pinned {pinned!r} has no digest", hint="run `ckit lock` again")
    return data


def check_lock(lock: dict[str, Any], path: Path, resolved: Any) -> str:
    """The pinned base reference, once the stack is seen to resolve as it did when it was locked."""
    if lock["fingerprint"] != resolved.fingerprint:
        raise ConfigError(
            f"--locked: {path} was written for {lock['stack']} with fingerprint {lock['fingerprint'][:12]}, but the "
            f"recipe now resolves to {resolved.fingerprint[:12]} (a recipe, --set or --ngc value changed)",
            hint=f"run `ckit lock {lock['stack']}` again with the same --set/--ngc, or build without --locked")
    return str(lock["base"]["pinned"])
