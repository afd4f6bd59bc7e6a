"""The importer's settings: ``/etc/ckit/importer.yaml`` (or ``$CKIT_IMPORTER_CONFIG``), then the environment.

```yaml
cache: /shared/ckit/images      # the cluster cache folder (CKIT_CLUSTER_CACHE overrides it)
site: oci                       # optional: a site profile; its shared_image_dir is the cache when `cache` is unset,
                                # and its squashfs_compressions limit the choice of compression (lz4:1 when
                                # its Pyxis runtime says squashfuse: true)
compression: zstd:-3            # optional (default: ckit's .sqsh default the site can mount; lz4:1 for squashfuse)
max_size: 500G                  # optional: evict least recently used images beyond this (K/M/G/T, powers of 1024)
allow_http: [registry.local:5000]   # optional: registries reached over plain http (like ENROOT_ALLOW_HTTP=y)
lock_stale_seconds: 120         # optional: a converter without progress this long is taken over
hold_max_age: 86400             # optional: a step's hold on an image expires after this many seconds
```
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.limits import parse_size
from ..errors import ConfigError

DEFAULT_CONFIG = Path("/etc/ckit/importer.yaml")
CONFIG_ENV = "CKIT_IMPORTER_CONFIG"
CACHE_ENV = "CKIT_CLUSTER_CACHE"
KEYS: dict[str, type | tuple[type, ...]] = {"cache": str, "site": str, "compression": str, "max_size": (str, int), "allow_http": list,
        "lock_stale_seconds": (int, float), "hold_max_age": (int, float)}
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")  # $USER in a site's shared_image_dir, from the job's environment


@dataclass(frozen=True)
class ImporterConfig:
    cache: Path
    compression: str | None = None
    allowed_compressions: tuple[str, ...] = ()
    squashfuse: bool = False  # the site's Pyxis reads the file through squashfuse (site: with squashfuse: true)
    max_size: int | None = None
    allow_http: tuple[str, ...] = ()
    lock_stale_seconds: float | None = None
    hold_max_age: float = 24 * 3600.0
    origin: str = ""  # where the cache path came from, for messages
    variables: tuple[str, ...] = ()  # the environment variables the cache path names


def _read_file(path: Path) -> dict[str, Any]:
    from ..config import yamlfile

    doc = yamlfile.load(path)
    if doc.data is None:
        return {}
    if not isinstance(doc.data, dict):
        raise doc.error((), "expected a mapping of settings")
    for key, value in doc.data.items():
        if key not in KEYS:
            from ..config.searchpath import suggest

            raise doc.error((str(key),), f"unknown setting {key!r}", hint=suggest(str(key), KEYS))
        if not isinstance(value, KEYS[key]) or isinstance(value, bool):
            raise doc.error((key,), f"{key} has the wrong type ({type(value).__name__})")
    return dict(doc.data)


def load(env: Mapping[str, str] | None = None, sites_dirs: tuple[Path, ...] = ()) -> ImporterConfig:
    """The settings from the config file (optional) and the environment; ConfigError when no cache is named."""
    env = os.environ if env is None else env
    path = Path(env.get(CONFIG_ENV) or DEFAULT_CONFIG)
    data = _read_file(path) if path.is_file() else {}
    origin = f"{path}: cache"
    allowed: tuple[str, ...] = ()
    squashfuse = False
    cache = data.get("cache")
    if data.get("site"):
        from ..site.load import load_site

        site = load_site(data["site"], sites_dirs)
        allowed, squashfuse = site.squashfs_compressions, site.reads_through_squashfuse()
        if not cache and site.shared_image_dir:
            cache, origin = site.shared_image_dir, f"site {site.name}: shared_image_dir"
    if env.get(CACHE_ENV):
        cache, origin = env[CACHE_ENV], CACHE_ENV
    if not cache:
        raise ConfigError("no cluster image cache is configured",
                          hint=f"set cache: in {path} (or site:), or {CACHE_ENV}=/shared/folder")
    expanded = os.path.expanduser(_VAR.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), str(cache)))
    if "$" in expanded or not os.path.isabs(expanded):
        raise ConfigError(f"cluster image cache {cache!r} ({origin}) is not an absolute path",
                          hint="name an absolute folder on a file system every node mounts")
    return ImporterConfig(
        cache=Path(expanded), compression=data.get("compression"), allowed_compressions=allowed, squashfuse=squashfuse,
        max_size=parse_size(data["max_size"], f"{path}: max_size") if "max_size" in data else None,
        allow_http=tuple(str(h) for h in data.get("allow_http") or ()),
        lock_stale_seconds=float(data["lock_stale_seconds"]) if "lock_stale_seconds" in data else None,
        hold_max_age=float(data.get("hold_max_age", 24 * 3600.0)), origin=origin,
        variables=tuple(m.group(1) or m.group(2) for m in _VAR.finditer(str(cache))))
