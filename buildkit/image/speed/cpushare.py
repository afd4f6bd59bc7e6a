"""The CPUs of a conversion's reading phase, shared so that the largest streamed layer is never starved.

The squashfs writer starts once every layer is in, so the reading phase ends with the layer that takes longest:
the largest one, decompressed by one thread (gzip cannot be split). While it streams, the other layers'
decompression and the precompressors (:mod:`..squashfs.precompress`) want the CPUs too, and with three layers arriving and
four precompressors on two CPUs the largest layer got a quarter of one: measured on a four-layer 1.4 GB image,
its 818 MB layer finished at 6.1 s while the writer needed 1.5 s after it.

So while the largest layer streams, it keeps one CPU to itself: everyone else takes a :class:`CpuShare` slot
per unit of work (one chunk of a layer, one run of blocks of a precompressor), from ``cpus - 1`` slots, in
arrival order. When the largest layer is in, its CPU joins the others. Work is only reordered, never dropped:
what the precompressors do not reach, the writer compresses later on every CPU.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator


class CpuShare:
    """Slots for the reading phase's work, handed out first come, first served (see the module doc)."""

    def __init__(self, cpus: int, reserve: bool = True) -> None:
        self._lock = threading.Lock()
        self._free = max(1, cpus - 1) if reserve and cpus > 1 else max(1, cpus)
        self._reserved = reserve and cpus > 1
        self._waiting: collections.deque[threading.Event] = collections.deque()

    def acquire(self) -> None:
        with self._lock:
            if self._free > 0 and not self._waiting:
                self._free -= 1
                return
            turn = threading.Event()
            self._waiting.append(turn)
        turn.wait()  # a releaser handed its slot to this thread

    def release(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().set()  # the slot passes on: no thread can take it out of turn
            else:
                self._free += 1

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()

    def unreserve(self) -> None:
        """The largest layer is in (or failed): its CPU joins the shared ones (once)."""
        with self._lock:
            if not self._reserved:
                return
            self._reserved = False
        self.release()

