"""Progress of long work, as a small protocol: the layers below the CLI report to it, the CLI draws it.

A :class:`Reporter` opens one :class:`Meter` per piece of work (reading layers, writing a squashfs, a build).
A meter is called with the units just done (bytes, or build steps), is told the total as soon as it is known
(until then the display can only be an honest spinner), and gets a new description when the work moves on.
:data:`SILENT` reports nowhere.

A meter can outlive its work: it is a callback handed to code that may still run after the ``with`` block that
opened it ended (a layer whose data the squashfs writer needs after the reading phase is read then, through
the reading's callback). So the contract is that a meter never fails: once its block has ended, every call is
accepted and dropped. Reporters get that from :func:`scoped` rather than each guarding its own calls: the
drawing meter is reached only while the block lasts, and the end waits for a report in flight.

The rich implementation lives in :mod:`buildkit.commands.progress_bars`, so nothing below the CLI depends on how
(or whether) progress is drawn.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Literal, Protocol, runtime_checkable

Unit = Literal["bytes", "steps"]


@runtime_checkable
class Meter(Protocol):
    def __call__(self, done: int) -> None:
        """``done`` more units are finished."""

    def total(self, total: int | None, *, completed: int | None = None) -> None:
        """The total is now known (or ``None``: unknown); ``completed`` resets the count."""

    def describe(self, text: str) -> None:
        """What is being done now."""


class Reporter(Protocol):
    def meter(self, description: str, *, total: int | None = None,
              unit: Unit = "bytes") -> AbstractContextManager[Meter]:
        """A meter for one piece of work; it disappears when the ``with`` block ends, and stays callable after
        (its calls are then dropped, never an error)."""


class _Scoped:
    """A meter that passes calls on to ``target`` until :meth:`end`, and drops them after."""

    def __init__(self, target: Meter) -> None:
        self._target: Meter | None = target
        self._lock = threading.Lock()  # reports come from worker threads: none may reach a display being removed

    def __call__(self, done: int) -> None:
        with self._lock:
            if self._target is not None:
                self._target(done)

    def total(self, total: int | None, *, completed: int | None = None) -> None:
        with self._lock:
            if self._target is not None:
                self._target.total(total, completed=completed)

    def describe(self, text: str) -> None:
        with self._lock:
            if self._target is not None:
                self._target.describe(text)

    def end(self) -> None:
        with self._lock:
            self._target = None


@contextmanager
def scoped(target: Meter, remove: Callable[[], None]) -> Iterator[Meter]:
    """What a reporter's :meth:`~Reporter.meter` yields: ``target`` (the drawing meter) while the block lasts;
    at its end the meter is cut off from ``target`` first, then ``remove`` takes the display away, so a late
    report never reaches a display that is gone."""
    meter = _Scoped(target)
    try:
        yield meter
    finally:
        meter.end()
        remove()


class _SilentMeter:
    def __call__(self, done: int) -> None:
        pass

    def total(self, total: int | None, *, completed: int | None = None) -> None:
        pass

    def describe(self, text: str) -> None:
        pass


class _Silent:
    @contextmanager
    def meter(self, description: str, *, total: int | None = None, unit: Unit = "bytes") -> Iterator[Meter]:
        yield _SilentMeter()


SILENT: Reporter = _Silent()
