"""Gets of one image on one node: the first does the work, the others wait for it instead of repeating it.

When several job steps on one node ask for the same image at once (a shared node, array jobs, or several
``srun`` of one job), one of them converts (or finds the image cached) and the others wait. Each waiter used to
start the whole importer (configuration, registry client, cache machinery: about 0.1 s of CPU) and ask the
registry itself, at the same time as the converter ran: on a node with few CPUs that start-up storm costs the
conversion everyone waits for. So the first ``get`` of a URI leaves a *marker* in its user's private folder of
the node's temporary folder (``$TMPDIR/ckit-<UID>``, 0700: no other user can plant, lock or read a marker there),
locked (``flock``, node-local) for as long as it works:

* A ``get`` that finds a live marker lowers its CPU priority first (nice 19; not ``SCHED_IDLE``, which an
  unprivileged process cannot leave again).
* If the marker was made with the same settings (the same environment apart from the
  step's own ``SLURM_JOB_ID``/``SLURM_STEP_ID``), the waiter waits for the marker's lock (a look every
  10 ms, about 1 ms of CPU a second) and takes the path the first one served: same user, same credentials and
  configuration, so the same access check and the same answer. It then takes its own hold on the file and checks that the file is still the one
  that was served (:func:`buildkit.importer.pyxis.serve_shared`); only the standard library is loaded.
* Anything else (other settings, the first ``get`` failed, was killed, served from the
  cache without reaching the registry, or is still at work after :data:`WAIT_LIMIT`) sends the waiter down the
  ordinary path: its own access check, the cluster cache's lease and records. The marker never decides what is
  served on its own.

A marker of a process that is gone is replaced; a symlink or a file that is not one is ignored; a marker is
written whole under a name of its own and then linked, so it is never seen half written.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time
import zlib

from ..fs import identity, quietly
from ..procstat import own_start, process_start

TYPE_CHECKING = False  # not typing's: this module loads before anything else, also in waiters that load nothing more
if TYPE_CHECKING:
    from collections.abc import Mapping

MARKER_BYTES = 8192  # a marker with its result: a header line and one line of paths
HOLDER_VARS = ("SLURM_JOB_ID", "SLURM_STEP_ID")  # name the step that holds the image: the waiter's own
WAIT_LIMIT = 300.0  # seconds a waiter waits before it takes the ordinary path (which knows stale converters)
POLL = 0.01  # seconds between looks at the peer's lock: two system calls, ~1 ms of CPU a second
_SERVED = "served"


class Marker:
    """This process's marker: its path and the open, locked file (the lock ends with the process)."""

    __slots__ = ("fd", "path")

    def __init__(self, path: str, fd: int) -> None:
        self.path, self.fd = path, fd


class Peer:
    """A live ``get`` of the same image by this user with the same settings: an open descriptor of its marker."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd


class Shared:
    """What a peer served: the cache folder, the artifact's key and path, and the file's identity then."""

    __slots__ = ("ident", "key", "path", "root")

    def __init__(self, root: str, key: str, path: str, ident: tuple[int, int, int]) -> None:
        self.root, self.key, self.path, self.ident = root, key, path, ident


def _digest(text: str) -> str:
    """64 bits of ``text`` for names and comparisons: the marker holds the URI itself, and a peer is only ever
    the same user, so these need no cryptographic hash (``hashlib`` would cost every waiter OpenSSL's loading)."""
    data = text.encode("utf-8", "surrogateescape")
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


def marker_path(uri: str, env: Mapping[str, str]) -> str | None:
    """Where the marker of ``uri`` goes: this user's private folder in the node's temporary folder (made 0700;
    None when what is there is not this user's alone, e.g. a folder or link another user planted)."""
    folder = os.path.join(env.get("TMPDIR") or "/tmp", f"ckit-{os.geteuid()}")  # noqa: S108 (checked below)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None
    return os.path.join(folder, f"importer-{_digest(uri)}.busy")


def settings(env: Mapping[str, str]) -> str:
    """What a get's answer depends on besides the URI and the user: its environment, less the step's name."""
    return _digest("\0".join(f"{k}={v}" for k, v in sorted(env.items()) if k not in HOLDER_VARS))


def _read(fd: int) -> list[str]:
    """A marker's lines (header, then the result once there is one); [] for junk."""
    data = os.pread(fd, MARKER_BYTES, 0)
    if len(data) >= MARKER_BYTES:
        return []
    return data.decode("utf-8", "surrogateescape").split("\n")


def _live_owner(fd: int) -> list[str] | None:
    """The lines of a marker whose process still runs (``pid start``, settings, URI, maybe a result), or None
    (gone, junk, not a regular file)."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return None
    lines = _read(fd)
    fields = lines[0].split() if lines else []
    pid = fields[0] if len(fields) == 2 and fields[0].isascii() and fields[0].isdigit() else None
    if pid is None or process_start(int(pid)) != fields[1]:
        return None
    return lines


def _open_existing(path: str, uri: str, env: Mapping[str, str]) -> Peer | bool:
    """Look at the marker already at ``path``: a :class:`Peer` to wait for, True for another live get (step
    aside, take the ordinary path), False when its process is gone (replace it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        lines = _live_owner(fd)
        if lines is None:
            return False
        if os.fstat(fd).st_uid == os.getuid() and lines[1:3] == [settings(env), uri]:
            peer, fd = Peer(fd), -1
            return peer
        return True
    finally:
        if fd >= 0:
            os.close(fd)


def _own_marker(path: str, uri: str, env: Mapping[str, str]) -> int | None:
    """A new marker file under this process's own name, written whole and locked; its descriptor."""
    own = f"{path}.{os.getpid()}"
    quietly(os.unlink, own)  # a crashed process's of the same pid (another user's is not ours: O_EXCL fails)
    try:
        fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    try:
        os.write(fd, f"{os.getpid()} {own_start()}\n{settings(env)}\n{uri}\n".encode("utf-8", "surrogateescape"))
        fcntl.flock(fd, fcntl.LOCK_EX)  # before it is linked: no waiter can see it unlocked
    except OSError:
        os.close(fd)
        fd = -1
    return fd if fd >= 0 else None


def claim(uri: str, env: Mapping[str, str]) -> Marker | Peer | None:
    """Leave this process's locked marker for ``uri`` (a :class:`Marker`: give it to :func:`publish`/:func:`drop`),
    or, when a live process already left one, step aside and return a :class:`Peer` to :func:`wait` for (same
    user, same settings) or None (take the ordinary path)."""
    path = marker_path(uri, env)
    fd = _own_marker(path, uri, env) if path is not None else None
    if path is None or fd is None:
        return None  # no usable temporary folder: no courtesy, nothing else changes
    own = f"{path}.{os.getpid()}"
    try:
        for _ in range(2):
            try:
                os.link(own, path)
                marker, fd = Marker(path, fd), -1
                return marker
            except FileExistsError:
                found = _open_existing(path, uri, env)
                if found is not False:
                    quietly(os.nice, 19)
                    return found if isinstance(found, Peer) else None
                quietly(os.unlink, path)  # the marker of a process that is gone: replace it (a lost race is harmless)
            except OSError:
                return None
        return None
    finally:
        quietly(os.unlink, own)
        if fd >= 0:
            os.close(fd)


def wait(peer: Peer, limit: float = WAIT_LIMIT) -> Shared | None:
    """Wait until the peer is done (its lock ends with it, also when it is killed); what it served, or None.
    It looks every :data:`POLL` seconds: a blocking lock would need a signal for its time limit, and signals
    belong to the caller."""
    deadline = time.monotonic() + limit
    try:
        while True:
            try:
                fcntl.flock(peer.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return None
                time.sleep(POLL)
        lines = _read(peer.fd)
    except OSError:
        return None
    finally:
        os.close(peer.fd)
    fields = lines[3].split("\0") if len(lines) == 5 and lines[4] == "" else []
    if len(fields) != 7 or fields[0] != _SERVED or not all(f.isascii() and f.isdigit() for f in fields[4:]):
        return None  # the peer failed, was killed, or did not reach the registry: nothing to take
    ino, size, mtime = (int(f) for f in fields[4:])
    return Shared(fields[1], fields[2], fields[3], (ino, size, mtime))


def publish(marker: Marker | Peer | None, root: str, key: str, path: str) -> None:
    """Tell this process's waiters what it served (before :func:`drop` lets them go)."""
    if not isinstance(marker, Marker) or any("\0" in f or "\n" in f for f in (root, key, path)):
        return
    try:
        ino, size, mtime = identity(path)
    except OSError:
        return
    line = "\0".join((_SERVED, root, key, path, str(ino), str(size), str(mtime)))
    quietly(os.write, marker.fd, line.encode("utf-8", "surrogateescape") + b"\n")


def drop(marker: Marker | Peer | None) -> None:
    """Remove this process's marker (only if the path still names it) and let its waiters go."""
    if not isinstance(marker, Marker):
        return
    own = os.fstat(marker.fd)
    try:
        st = os.stat(marker.path, follow_symlinks=False)
    except OSError:
        st = None
    if st is not None and (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
        quietly(os.unlink, marker.path)
    os.close(marker.fd)
