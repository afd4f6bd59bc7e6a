"""Leases: one holder of a name at a time, across processes and hosts, on any POSIX file system.

Used by the local artifact store and by the cluster image cache, which may sit on NFS or Lustre where ``flock``
and ``fcntl`` locks are missing, emulated, or lost when a client dies. A lease relies only on operations that are
atomic on those file systems too:

* **Taking it**: the holder writes its owner record (token, host, pid and process start time, holder name) to a
  file of its own, ``NAME.<token>``, then ``link()``\\ s it to ``NAME``. ``link`` fails with EEXIST when the name is
  taken, atomically, on local file systems, NFS (v2/v3/v4) and Lustre. An NFS reply lost on the way can make a
  successful link report an error: the link count of the holder's own file (2) then tells the truth.
* **Proof of life**: a holder's heartbeat touches its own file (the same inode, so ``NAME``'s times change too).
  A heartbeat counts only when the holder made progress since the last one: it read bytes (``rchar`` in
  ``/proc/self/io``: downloads, layer reads) or called :meth:`Lease.progress`. A holder stuck in a loop at 100 %
  CPU reads nothing, stops beating, and its lease goes stale: it does not wedge everyone else.
* **Staleness**: a waiter watches the lock's inode, times and owner token. It declares the lease stale when they
  have not changed for ``stale`` seconds *of its own clock* (no clock comparison between hosts), or at once when the
  owner ran on this host and its process is gone (a SIGKILLed holder; PID reuse is caught by the start time).
* **Takeover**: the waiter ``rename()``\\ s the stale ``NAME`` to a name of its own (atomic: of several waiters one
  wins), checks that what it moved is the inode and token it judged stale, and deletes it. In the rare race where
  it moved a lease taken meanwhile by someone else, it links it back; if that fails, the new holder sees at its next
  heartbeat that it lost the name (:attr:`Lease.lost`) and must not publish. Whatever the holder made is checked and
  renamed into place atomically by its caller, so a lost or broken lease can cost work, never a partial file.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConvertError
from ..procstat import process_start

STALE_ENV = "CKIT_LOCK_STALE_SECONDS"
WAIT_ENV = "CKIT_LOCK_WAIT_SECONDS"
DEFAULT_WAIT = 3600.0  # an overall bound on any wait: a holder that keeps beating without finishing is given up on
DEFAULT_STALE = 120.0  # seconds without progress; a conversion reports progress at least every few seconds
BEAT_EVERY = 1.0
WAIT_REPORT_EVERY = 15.0
MAX_POLL = 0.25  # a waiter looks again at least this often (a stat and a small read each: cheap on NFS too)
MIN_POLL = 0.02
POLL_SHARE = 0.03  # between looks a waiter sleeps 3 % of its wait so far: it learns of the end at most ~3 % late
HOST = socket.gethostname()


def wait_seconds() -> float:
    """How long a waiter waits for a lease at most, however alive its holder looks (``CKIT_LOCK_WAIT_SECONDS``)."""
    text = os.environ.get(WAIT_ENV, "").strip()
    try:
        return max(float(text), 1.0) if text.isascii() and text else DEFAULT_WAIT
    except ValueError:
        return DEFAULT_WAIT


def stale_seconds(value: float | None = None) -> float:
    if value is not None:
        return value
    text = os.environ.get(STALE_ENV, "").strip()
    try:
        return max(float(text), 0.5) if text else DEFAULT_STALE
    except ValueError:
        return DEFAULT_STALE


def _namespace() -> str:
    """The boot and the PID namespace this process runs in: a pid means the same process only within both (a
    container or a Slurm node in its own PID namespace may share the host name)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read(64).strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


NAMESPACE = _namespace()
_TOKEN = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Owner:
    """Who holds a lease, as written in its record."""

    token: str
    host: str
    pid: int
    start: str | None
    holder: str = ""
    since: float = 0.0
    namespace: str = ""

    @classmethod
    def me(cls, holder: str = "") -> Owner:
        return cls(os.urandom(16).hex(), HOST, os.getpid(), process_start(os.getpid()), holder, time.time(),
                   NAMESPACE)

    @classmethod
    def parse(cls, data: bytes) -> Owner | None:
        """The owner a record names, or None for anything that is not a record ckit wrote."""
        try:
            raw = json.loads(data)
            owner = cls(str(raw["token"]), str(raw["host"])[:255], int(raw["pid"]), raw.get("start"),
                        str(raw.get("holder", ""))[:255], float(raw.get("since", 0)),
                        str(raw.get("namespace", ""))[:255])
        except (ValueError, KeyError, TypeError, OverflowError):
            return None
        sound = len(owner.token) == 32 and _TOKEN.issuperset(owner.token) and 0 < owner.pid < 2**31 \
            and (owner.start is None or isinstance(owner.start, str))
        return owner if sound else None

    def encode(self) -> bytes:
        return json.dumps({"token": self.token, "host": self.host, "pid": self.pid, "start": self.start,
                           "holder": self.holder, "since": self.since, "namespace": self.namespace}).encode()

    def gone(self) -> bool:
        """The owner ran on this host, in this boot and PID namespace, and its process no longer exists (or is
        another process now). An owner of another namespace is never judged gone: only its lack of progress
        can free its lease."""
        if self.host != HOST or not self.namespace or self.namespace != NAMESPACE:
            return False
        start = process_start(self.pid)
        return start is None or (self.start is not None and start != self.start)

    def describe(self) -> str:
        what = f" ({self.holder})" if self.holder else ""
        return f"pid {self.pid} on {self.host}{what}"


def read_owner(path: Path) -> tuple[os.stat_result, Owner | None] | None:
    """The lock file's status and owner (opening it refreshes NFS's cached attributes), or None if absent. Never
    followed through a link, never a blocking open; anything but a regular file has no owner."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        st = os.lstat(path)  # a link: its own status (FileNotFoundError: gone meanwhile, the caller's to see)
        return st, None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return st, None
        return st, Owner.parse(os.read(fd, 4096))
    except OSError:
        return None
    finally:
        os.close(fd)


def holder_text(seen: tuple[os.stat_result, Owner | None] | None) -> str:
    """Who holds a lease, for a waiting line: the user (the lock file's owner), the host and pid, the step."""
    if seen is None:
        return "a holder that is gone"
    who = seen[1].describe() if seen[1] is not None else "an unknown holder"
    return f"uid {seen[0].st_uid}, {who}"


def _rchar() -> int | None:
    """Bytes this process has read so far (all threads), or None where the kernel does not say."""
    try:
        with open("/proc/self/io", "rb") as handle:
            for line in handle.read().splitlines():
                if line.startswith(b"rchar:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _kind(mode: int) -> str:
    return "a folder" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode) else \
        "a FIFO" if stat.S_ISFIFO(mode) else "a special file"


class Lease:
    """A lease on the file ``path``. Use as a context manager, or :meth:`acquire` / :meth:`release`."""

    def __init__(self, path: Path, *, stale: float | None = None, holder: str = "",
                 on_wait: Callable[[str], None] | None = None, mode: int = 0o644) -> None:
        self.path = Path(path)
        self.stale = stale_seconds(stale)
        self.owner = Owner.me(holder)
        self.own = self.path.with_name(f"{self.path.name}.{self.owner.token}")
        self.on_wait = on_wait
        self.mode = mode
        self.lost = False
        self._ino: int | None = None
        self._ticks = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- holder side ---------------------------------------------------------------------------------

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def try_acquire(self) -> bool:
        """Take the lease if nobody holds it; never waits."""
        if not self.own.exists():
            fd = os.open(self.own, os.O_WRONLY | os.O_CREAT | os.O_EXCL, self.mode)
            try:
                os.write(fd, self.owner.encode())
                os.fsync(fd)
                with contextlib.suppress(OSError):
                    os.fchmod(fd, self.mode)
            finally:
                os.close(fd)
        try:
            os.link(self.own, self.path)
        except FileExistsError:
            # On NFS a retransmitted link whose first reply was lost fails with EEXIST although it worked:
            # the link count of our own file says which it was.
            if os.stat(self.own).st_nlink != 2:
                return False
        except OSError:
            if os.stat(self.own).st_nlink != 2:
                raise
        self._ino = os.stat(self.own).st_ino
        self.lost = False
        self._start_heartbeat()
        return True

    def acquire(self, timeout: float | None = None, until: Callable[[], bool] | None = None) -> bool:
        """Wait for the lease, taking it over when its holder is gone or has made no progress for ``stale`` s.

        ``until`` is asked between tries: when it says the work is done (someone else did it), stop waiting and
        return False without the lease. True: the lease is ours."""
        began = time.monotonic()
        limit = wait_seconds() if timeout is None else timeout
        watch = Watch(self.stale)
        reported = began
        try:
            while not self.try_acquire():
                if until is not None and until():
                    self.own.unlink(missing_ok=True)
                    return False
                seen = read_owner(self.path)
                if seen is not None and not stat.S_ISREG(seen[0].st_mode):
                    raise ConvertError(f"{self.path} is not a lease file but {_kind(seen[0].st_mode)}",
                                       hint=f"remove it: rm -r {self.path}")
                if seen is not None and watch.is_stale(*seen):
                    self._break(*seen)
                    watch = Watch(self.stale)
                    continue
                now = time.monotonic()
                if now - began > limit:
                    who = holder_text(seen)
                    raise ConvertError(f"gave up waiting for {who}, which has held {self.path} for {limit:.0f} s",
                                       hint=f"retry later, or raise {WAIT_ENV} (seconds)")
                if self.on_wait and seen is not None and now - reported >= WAIT_REPORT_EVERY:
                    reported = now
                    self.on_wait(f"waiting for {holder_text(seen)}, holding {self.path.name} for "
                                 f"{now - began:.0f} s (at most {limit:.0f} s: {WAIT_ENV})")
                delay = min(max((now - began) * POLL_SHARE, MIN_POLL), MAX_POLL)
                time.sleep(delay * (0.7 + 0.6 * os.urandom(1)[0] / 255))  # jitter: waiters spread out
        except BaseException:
            self.own.unlink(missing_ok=True)
            raise
        return True

    def release(self) -> None:
        """Give the lease up (only the name still linked to our own file is removed)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with contextlib.suppress(OSError):
            if self._ino is not None and os.stat(self.path).st_ino == self._ino:
                os.unlink(self.path)
        self.own.unlink(missing_ok=True)
        self._ino = None

    def progress(self) -> None:
        """Tell the heartbeat that the holder moved forward (for work that reads nothing)."""
        self._ticks += 1

    def beat(self) -> None:
        """Touch our own file; notice when the name is no longer ours."""
        try:
            os.utime(self.own)
            if os.stat(self.path).st_ino != self._ino:
                self.lost = True
        except OSError:
            self.lost = True

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._heartbeat, name=f"lease {self.path.name}", daemon=True)
        self._thread.start()

    def _heartbeat(self) -> None:
        last_read, last_ticks = _rchar(), self._ticks
        timer_only = last_read is None  # no /proc/self/io: beat on time alone (cannot see a spinning holder)
        while not self._stop.wait(min(BEAT_EVERY, self.stale / 4)):
            read, ticks = _rchar(), self._ticks
            moved = timer_only or ticks != last_ticks or (read is not None and last_read is not None
                                                          and read > last_read + 256)
            last_ticks = ticks
            if read is not None:
                last_read = read + 256  # what reading /proc/self/io itself adds to rchar
            if moved:
                self.beat()

    # -- waiter side ---------------------------------------------------------------------------------

    def _break(self, st: os.stat_result, owner: Owner | None) -> None:
        grave = self.path.with_name(f"{self.path.name}.broken.{self.owner.token}")
        try:
            os.rename(self.path, grave)
        except FileNotFoundError:
            return
        try:
            moved = read_owner(grave)
            if moved is not None and moved[0].st_ino == st.st_ino and moved[1] == owner:
                if owner is not None:
                    self.path.with_name(f"{self.path.name}.{owner.token}").unlink(missing_ok=True)
            else:
                with contextlib.suppress(FileExistsError):
                    os.link(grave, self.path)
        finally:
            grave.unlink(missing_ok=True)


class Watch:
    """A waiter's view of one lease: how long (by this process's clock) nothing about it has changed."""

    def __init__(self, stale: float) -> None:
        self.stale = stale
        self.seen: tuple[object, ...] | None = None
        self.since = time.monotonic()

    def is_stale(self, st: os.stat_result, owner: Owner | None) -> bool:
        state = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size, owner.token if owner else None)
        if state != self.seen:
            self.seen, self.since = state, time.monotonic()
        if owner is not None and owner.gone():
            return True
        return time.monotonic() - self.since > self.stale


def clear_if_gone(path: Path, holder: str | None = None) -> bool:
    """Remove the lease at ``path`` when its owner ran on this host and is gone (and was ``holder``, if given)."""
    seen = read_owner(path)
    if seen is None or seen[1] is None or not seen[1].gone():
        return False
    if holder is not None and seen[1].holder != holder:
        return False
    Lease(path)._break(*seen)
    return True
