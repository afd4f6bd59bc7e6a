"""The Pyxis importer: ``ckit-pyxis-importer get IMAGE_URI`` and ``ckit-pyxis-importer release``.

Pyxis (``plugstack.conf``: ``required spank_pyxis.so importer=/usr/local/bin/ckit-pyxis-importer``) runs it as the
job's user on the compute node, with enroot's environment and ``SLURM_JOB_ID``/``SLURM_STEP_ID``:

* ``get`` prints the absolute path of a squashfs file on stdout and nothing else (everything else goes to
  stderr, which Pyxis shows when the exit status is not 0). The file lives in the cluster cache (see
  :mod:`buildkit.storage.cache`): converted once per cluster, then served to every node and job, each caller's access checked
  with the registry first. The step holds the image until ``release``.
* ``release`` drops the step's holds (and the lease of a ``get`` of this step killed while converting). Pyxis
  calls it twice, also after a SIGKILL: it never fails, and the second call finds nothing to do.

The cached path imports little (no CLI framework, no converter), so a cached ``get`` costs about the Python
start-up plus one registry round trip.
"""

from __future__ import annotations

import os
import sys

from . import peers

TYPE_CHECKING = False  # not typing's: a waiter handed its image by a peer loads nothing it can do without
if TYPE_CHECKING:  # the fetch machinery loads only when an image is fetched (start-up time)
    from collections.abc import Callable, Mapping

    from ..orchestration.fetch import Served
    from ..storage.cache import CacheDir

PROG = "ckit-pyxis-importer"
USAGE = f"usage: {PROG} get IMAGE_URI | {PROG} release"
SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._@-")


def log(message: str) -> None:
    """A line on stderr, which Pyxis shows the user: outside text in it (a URI, a registry's answer) escaped."""
    if not message.isprintable():
        from ..outside import shown

        message = shown(message, lines=True)
    sys.stderr.write(f"{PROG}: {message}\n")
    sys.stderr.flush()


def holder_id(env: Mapping[str, str]) -> str:
    """The step, as a file name: ``<job>.<step>@<host>`` (characters outside ``[A-Za-z0-9._@-]`` become ``_``)."""
    job, step = (env.get(name) or default for name, default in zip(peers.HOLDER_VARS, ("nojob", "nostep"),
                                                                    strict=True))
    return "".join(c if c in SAFE else "_" for c in f"{job}.{step}@{os.uname().nodename}")[:200]


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "y", "yes", "true", "on")


def get(uri_text: str, env: Mapping[str, str]) -> tuple[Served, str | None]:
    """What ``get`` serves, and the cache folder when waiting peers may take the same answer (see
    :mod:`.peers`): not when it was served offline, nor when the cache folder depends on the step."""
    from ..image.squashfs.compression import choose
    from ..orchestration.fetch import Want, ensure
    from ..storage.cache import CacheDir
    from ..storage.lease import STALE_ENV
    from ..storage.store import default_root
    from . import config as config_mod
    from .netrc import lookup
    from .uri import parse_uri

    cfg = config_mod.load(env)
    uri = parse_uri(uri_text)
    if cfg.lock_stale_seconds and not env.get(STALE_ENV):
        os.environ[STALE_ENV] = str(cfg.lock_stale_seconds)
    credentials = lookup(uri.ref.registry, uri.user, env)
    if credentials is None:
        from ..registry.distribution.auth import resolve

        credentials = resolve(uri.ref.registry)  # docker's config (and CKIT_REGISTRY_*), like `ckit pull`
    compression = choose(cfg.compression, cfg.allowed_compressions, target="sqsh", site_name=cfg.origin,
                         squashfuse=cfg.squashfuse)
    insecure = _flag(env.get("ENROOT_ALLOW_HTTP")) or uri.ref.registry in cfg.allow_http
    holder = holder_id(env)
    # a user who may not write the cache converts into their own store instead (and reads the cache still)
    cache = CacheDir(cfg.cache, cfg.hold_max_age, fallback=default_root())
    cache.holder, cache.on_wait = holder, log
    want = Want(uri.ref, "sqsh", compression.label, credentials, insecure=insecure, holder=holder, uid=os.getuid())
    try:
        served = ensure(cache, want, log)
    except OSError as err:
        raise _os_error(err, cache) from err
    if cache.folder.taken:
        log(f"warning: {cache.folder.taken}: another user made it under your name, so your images go to your "
            f"personal store {default_root()} (ask the cluster's admin to remove it)")
    if served.converted and cfg.max_size is not None:
        for gone in cache.evict(cfg.max_size):
            log(f"evicted {gone.meta.get('source') or gone.key} ({gone.size / 1e6:.0f} MB, least recently used)")
    per_step = any(name in cfg.variables for name in peers.HOLDER_VARS)
    tree = cache.own_root()
    return served, None if served.offline or per_step or tree is None else str(tree)


def _os_error(err: OSError, cache: CacheDir) -> Exception:
    """An OSError of a conversion as one line naming where it wrote and what to do (a full disk has no file)."""
    import errno

    from ..errors import os_error

    where = err.filename if err.filename is not None else cache.own_root() or cache.root
    failed = os_error(err, where, "write the image")
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        failed.hint = (f"free space there (ckit cache prune --cache {cache.root} --max-size SIZE removes your least "
                       "recently used images), or ask the cluster's admin")
    return failed


def serve_shared(shared: peers.Shared, env: Mapping[str, str]) -> str | None:
    """The path a peer served, once this step holds it (in the tree where the peer, the same user, keeps its
    holds) and it is still the file the peer served; None otherwise (then the ordinary path runs). Loads nothing
    but the standard library."""
    from ..fs import identity
    from ..storage import holds
    from ..storage.safefs import Unsafe

    try:
        holds.hold(shared.root, shared.key, holder_id(env))  # before the look, as the ordinary path does
        holds.touch(shared.root, shared.key)
        same = identity(shared.path) == shared.ident
    except (OSError, ValueError, Unsafe):
        return None
    return shared.path if same else None


def _from_peer(peer: peers.Peer, env: Mapping[str, str]) -> str | None:
    shared = peers.wait(peer)
    return serve_shared(shared, env) if shared is not None else None


def _get(uri: str, env: Mapping[str, str], claimed: peers.Marker | peers.Peer | None) -> str:
    try:
        served, root = get(uri, env)
        if root is not None:
            peers.publish(claimed, root, served.key, str(served.path))
        return str(served.path)
    finally:
        peers.drop(claimed)


def release(env: Mapping[str, str]) -> int:
    """Drop this step's holds; never fails (Pyxis may call it twice, and after a SIGKILL)."""
    from ..errors import CkitError
    from ..storage.cache import CacheDir
    from ..storage.lease import clear_if_gone
    from ..storage.store import default_root
    from ..storage.trust import tree_name
    from . import config as config_mod

    holder = holder_id(env)
    try:
        cfg = config_mod.load(env)
    except CkitError as err:
        log(f"release: nothing to release ({err.message})")
        return 0
    try:
        dropped = CacheDir(cfg.cache, fallback=default_root()).release(holder)
        for tree in (cfg.cache / tree_name(os.geteuid()), default_root()):
            for lease in (tree / "locks").glob("*.lease"):
                clear_if_gone(lease, holder)
    except OSError as err:
        log(f"release: {err}")
        return 0
    return dropped


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    if len(args) == 2 and args[0] == "get":
        claimed = peers.claim(args[1], env)  # first, before the start-up work a waiter should not compete with
        path = _from_peer(claimed, env) if isinstance(claimed, peers.Peer) else None
        return _print(path) if path is not None else _run(lambda: _get(args[1], env, claimed))
    if args == ["release"]:
        return _run(lambda: release(env))
    log(USAGE)
    return 2


def _print(path: str) -> int:
    sys.stdout.write(path + "\n")
    sys.stdout.flush()
    return 0


def _run(work: Callable[[], object]) -> int:
    """``work`` with stdout kept for the path alone (whatever a library might print goes to stderr), its errors
    as exit statuses; the path it returns (a str), if any, printed."""
    from ..errors import CkitError

    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        try:
            path = work()
        finally:
            sys.stdout = real_stdout
    except CkitError as err:
        log(f"error: {err}")
        return err.exit_code
    except OSError as err:
        log(f"error: {err.filename or ''}: {err.strerror or err}")
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    return _print(path) if isinstance(path, str) else 0


def run() -> None:
    """Console-script entry point (``ckit-pyxis-importer``)."""
    from ..errors import exit_status

    sys.exit(exit_status(main()))
