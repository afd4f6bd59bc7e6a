"""The Pyxis importer: ``ckit-pyxis-importer get IMAGE_URI`` and ``ckit-pyxis-importer release``.

Pyxis (``plugstack.conf``: ``required spank_pyxis.so importer=/usr/local/bin/ckit-pyxis-importer``) runs it as the
job's user on the compute node, with enroot's environment and ``SLURM_JOB_ID``/``SLURM_STEP_ID``:

* ``get`` prints the absolute path of a squashfs file on stdout and nothing else (everything else goes to
  stderr, which Pyxis shows when the exit status is not 0). The file lives in the cluster cache (see
  :mod:`.layout`): converted once per cluster, then served to every node and job, each caller's access checked
  with the registry first. The step holds the image until ``release``.
* ``release`` drops the step's holds (and the lease of a ``get`` of this step killed while converting). Pyxis
  calls it twice, also after a SIGKILL: it never fails, and the second call finds nothing to do.

The cached path imports little (no CLI framework, no converter), so a cached ``get`` costs about the Python
start-up plus one registry round trip.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import CkitError
from . import peers

if TYPE_CHECKING:  # the fetch machinery loads only when an image is fetched (start-up time)
    from .fetch import Served

PROG = "ckit-pyxis-importer"
USAGE = f"usage: {PROG} get IMAGE_URI | {PROG} release"
UNSAFE = r"[^A-Za-z0-9._@-]"


def log(message: str) -> None:
    sys.stderr.write(f"{PROG}: {message}\n")
    sys.stderr.flush()


def holder_id(env: Mapping[str, str]) -> str:
    """The step, as a file name: ``<job>.<step>@<host>``."""
    import re
    import socket

    job, step = env.get("SLURM_JOB_ID") or "nojob", env.get("SLURM_STEP_ID") or "nostep"
    return re.sub(UNSAFE, "_", f"{job}.{step}@{socket.gethostname()}")[:200]


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "y", "yes", "true", "on")


def get(uri_text: str, env: Mapping[str, str]) -> Served:
    from ..cachedir.layout import CacheDir
    from ..image.squashfs import choose
    from ..lease import STALE_ENV
    from . import config as config_mod
    from .fetch import Want, ensure
    from .netrc import lookup
    from .uri import parse_uri

    cfg = config_mod.load(env)
    uri = parse_uri(uri_text)
    if cfg.lock_stale_seconds and not env.get(STALE_ENV):
        os.environ[STALE_ENV] = str(cfg.lock_stale_seconds)
    credentials = lookup(uri.ref.registry, uri.user, env)
    if credentials is None:
        from ..registry.auth import resolve

        credentials = resolve(uri.ref.registry)  # docker's config (and CKIT_REGISTRY_*), like `ckit pull`
    compression = choose(cfg.compression, cfg.allowed_compressions, target="sqsh", site_name=cfg.origin)
    insecure = _flag(env.get("ENROOT_ALLOW_HTTP")) or uri.ref.registry in cfg.allow_http
    holder = holder_id(env)
    cache = CacheDir(cfg.cache, cfg.hold_max_age)
    cache.store.holder, cache.store.on_wait = holder, log
    want = Want(uri.ref, "sqsh", compression.label, credentials, insecure=insecure, holder=holder, uid=os.getuid())
    served = ensure(cache, want, log)
    if served.converted and cfg.max_size is not None:
        for gone in cache.evict(cfg.max_size):
            log(f"evicted {gone.meta.get('source') or gone.key} ({gone.size / 1e6:.0f} MB, least recently used)")
    return served


def release(env: Mapping[str, str]) -> int:
    """Drop this step's holds; never fails (Pyxis may call it twice, and after a SIGKILL)."""
    from ..cachedir.layout import CacheDir
    from ..lease import clear_if_gone
    from . import config as config_mod

    holder = holder_id(env)
    try:
        cfg = config_mod.load(env)
    except CkitError as err:
        log(f"release: nothing to release ({err.message})")
        return 0
    try:
        dropped = CacheDir(cfg.cache).release(holder)
        for lease in (cfg.cache / "locks").glob("*.lease"):
            clear_if_gone(lease, holder)
    except OSError as err:
        log(f"release: {err}")
        return 0
    return dropped


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # the stdout contract: only the path, whatever a library might print
    try:
        if len(args) == 2 and args[0] == "get":
            marker = peers.claim(args[1], env)  # first, before the start-up work a waiter should not compete with
            try:
                path = str(get(args[1], env).path)
            finally:
                peers.drop(marker)
        elif args == ["release"]:
            release(env)
            return 0
        else:
            log(USAGE)
            return 2
    except CkitError as err:
        log(f"error: {err}")
        return err.exit_code
    except OSError as err:
        log(f"error: {err.filename or ''}: {err.strerror or err}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        sys.stdout = real_stdout
    real_stdout.write(path + "\n")
    real_stdout.flush()
    return 0


def run() -> None:
    """Console-script entry point (``ckit-pyxis-importer``)."""
    sys.exit(main())
