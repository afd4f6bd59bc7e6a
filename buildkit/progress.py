"""Progress of long work, as a small protocol: the layers below the CLI report to it, the CLI draws it.

A :class:`Reporter` opens one :class:`Meter` per piece of work (reading layers, writing a squashfs, a build).
A meter is called with the units just done (bytes, or build steps), is told the total as soon as it is known
(until then the display can only be an honest spinner), and gets a new description when the work moves on.
:data:`SILENT` reports nowhere. The rich implementation lives in :mod:`buildkit.commands.progress_bars`, so nothing below
the CLI depends on how (or whether) progress is drawn.
"""

from __future__ import annotations

from collections.abc import Iterator
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
        """A meter for one piece of work; it disappears when the ``with`` block ends."""


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
