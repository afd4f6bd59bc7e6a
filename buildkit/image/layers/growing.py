"""A spool file being written while it is read: the stream's writer advances it, readers wait for the bytes
they ask for. A streamed layer's header scan (:mod:`.headerscan`) and its precompressor
(:mod:`..squashfs.precompress`) follow the spool this way while the layer still arrives."""

from __future__ import annotations

import os
import threading


class Abandoned(Exception):  # noqa: N818 - a signal between threads, never shown to the user
    """The stream failed or the precompressor was stopped."""


class Growing:
    """A spool file being written: :meth:`pread` waits until the bytes asked for are there (or the stream ended)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.written, self.done, self.failed, self.stopped = 0, False, False, False

    def advance(self, n: int) -> None:
        with self._cond:
            self.written += n
            self._cond.notify_all()

    def finish(self, ok: bool) -> None:
        with self._cond:
            self.done, self.failed = True, not ok
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self.stopped = True
            self._cond.notify_all()

    def wait(self, upto: int) -> int:
        """Bytes available up to ``upto`` once that many are written or the stream has ended."""
        with self._cond:
            while self.written < upto and not self.done and not self.stopped:
                self._cond.wait()
            if self.failed or self.stopped:
                raise Abandoned
            return min(self.written, upto)

    def pread(self, fd: int, n: int, pos: int) -> bytes:
        return os.pread(fd, max(0, self.wait(pos + n) - pos), pos)
