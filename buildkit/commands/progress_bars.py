"""The terminal side of :mod:`buildkit.progress`: one rich display per command, one line per meter.

A line shows what is being done, then either a bar, the count, the rate and the time left (when the total
is known) or a spinner, the count, the rate and the time spent (when it is not): never a made-up total, an
ETA without a total, or a count that disagrees with the description. A meter appears with its first news
(so work that never reports leaves nothing stale on screen) and disappears when its work ends.

The columns after the description have fixed widths and the description gets what is left of the terminal's
width, cut with an ellipsis: a long build step never pushes the bar off an 80-column line. The rate and the
time left come from a :class:`Speedometer` that counts a pause (no bytes arriving) as time at rate zero, so the
ETA grows while nothing arrives and the line says ``stalled`` after a few seconds, instead of the last burst's
ETA standing still.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.filesize import decimal
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TaskID
from rich.table import Column
from rich.text import Text

from ..outside import shown
from ..progress import Meter, Unit, scoped

WIDTHS = {"count": 18, "rate": 11, "time": 15}  # "999 bytes/999.9 MB", "999 bytes/s", "stalled 0:00:12"
STALL_SECONDS = 5.0


class Speedometer:
    """The rate of the last ``window`` seconds of work, a pause included: the units reported in the window over
    the time the window spans up to now, so the rate decays while nothing arrives. Reports come from worker
    threads while the display reads it."""

    def __init__(self, window: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window, self.clock = window, clock
        self.started = clock()
        self.last: float | None = None  # when units last arrived
        self._samples: deque[tuple[float, int]] = deque()
        self._lock = threading.Lock()

    def add(self, units: int) -> None:
        now = self.clock()
        with self._lock:
            self._samples.append((now, units))
            self.last = now
            self._forget(now)

    def _forget(self, now: float) -> None:
        while self._samples and self._samples[0][0] < now - self.window:
            self._samples.popleft()

    def rate(self) -> float | None:
        """Units per second; None before any arrived."""
        now = self.clock()
        with self._lock:
            self._forget(now)
            if self.last is None:
                return None
            span = min(self.window, max(1.0, now - self.started))  # a first burst is no rate for an hour
            return sum(units for _, units in self._samples) / span

    def stalled_for(self) -> float | None:
        """Seconds since units last arrived, once that is more than :data:`STALL_SECONDS`; else None."""
        since = self.clock() - (self.last if self.last is not None else self.started)
        return since if since >= STALL_SECONDS else None


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    whole = max(0, int(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def count_text(completed: float, total: float | None, unit: str) -> str:
    """``12.3/45.6 MB`` or ``12.3 MB`` for bytes; nothing for steps (the description names the step)."""
    if unit != "bytes":
        return ""
    if total is None:
        return decimal(int(completed))
    done, whole = decimal(int(completed)), decimal(int(total))
    same_unit = done.split()[-1] == whole.split()[-1]
    return f"{done.split()[0] if same_unit else done}/{whole}"


def time_text(task: Task) -> str:
    """``eta 0:01:05`` when the total is known (``eta -:--:--`` until a rate is measured, ``stalled 0:00:12``
    when nothing arrived for a while), else the time spent."""
    if task.total is None:
        return clock(task.elapsed)
    speed: Speedometer | None = getattr(task, "fields", {}).get("speed")
    if speed is None:
        return "eta " + clock(task.time_remaining)
    stalled = speed.stalled_for()
    if stalled is not None:
        return "stalled " + clock(stalled)
    rate = speed.rate()
    return "eta " + clock(max(0.0, task.total - task.completed) / rate if rate else None)


def _fixed(width: int) -> Column:
    return Column(width=width, no_wrap=True, overflow="crop")


class _Description(ProgressColumn):
    """The description, cut to what the fixed columns leave of the terminal's width."""

    def __init__(self, console: Console, rest: int) -> None:
        super().__init__(table_column=Column(no_wrap=True, overflow="ellipsis"))
        self.console, self.rest = console, rest

    def render(self, task: Task) -> Text:
        text = Text(task.description, no_wrap=True, overflow="ellipsis")
        text.truncate(max(8, self.console.width - self.rest), overflow="ellipsis")
        return text


class _BarOrSpinner(ProgressColumn):
    def __init__(self, width: int) -> None:
        super().__init__(table_column=_fixed(width))
        self.bar, self.spinner = BarColumn(bar_width=width), SpinnerColumn(finished_text=" ")

    def render(self, task: Task) -> Any:
        return self.spinner.render(task) if task.total is None else self.bar.render(task)


class _Count(ProgressColumn):
    def __init__(self) -> None:
        super().__init__(table_column=_fixed(WIDTHS["count"]))

    def render(self, task: Task) -> Text:
        return Text(count_text(task.completed, task.total, task.fields.get("unit", "bytes")),
                    style="progress.download")


class _Rate(ProgressColumn):
    def __init__(self) -> None:
        super().__init__(table_column=_fixed(WIDTHS["rate"]))

    def render(self, task: Task) -> Text:
        speed: Speedometer | None = task.fields.get("speed")
        rate = speed.rate() if speed is not None and task.fields.get("unit") == "bytes" else None
        return Text(f"{decimal(int(rate))}/s" if rate else "", style="progress.data.speed")


class _Time(ProgressColumn):
    def __init__(self) -> None:
        super().__init__(table_column=_fixed(WIDTHS["time"]))

    def render(self, task: Task) -> Text:
        return Text(time_text(task), style="progress.remaining")


class RichMeter:
    """A :class:`~buildkit.progress.Meter` that is one task line of a rich Progress, while the line exists
    (:func:`~buildkit.progress.scoped` keeps later calls from it: rich raises for a task it removed)."""

    def __init__(self, bar: Progress, task: TaskID, speed: Speedometer) -> None:
        self.bar, self.task, self.speed = bar, task, speed

    def __call__(self, done: int) -> None:
        self.speed.add(done)
        self.bar.update(self.task, advance=done, visible=True)

    def total(self, total: int | None, *, completed: int | None = None) -> None:
        self.bar.tasks[self._index()].total = total  # rich's update() treats None as "unchanged"
        self.bar.update(self.task, completed=completed, visible=True)

    def describe(self, text: str) -> None:
        self.bar.update(self.task, description=shown(text), visible=True)

    def _index(self) -> int:
        return next(i for i, t in enumerate(self.bar.tasks) if t.id == self.task)


class RichReporter:
    def __init__(self, bar: Progress, *, drawing: bool) -> None:
        self.bar, self.drawing = bar, drawing  # drawing: False when hidden (--quiet, not a terminal)

    @contextmanager
    def meter(self, description: str, *, total: int | None = None, unit: Unit = "bytes") -> Iterator[Meter]:
        speed = Speedometer()
        task = self.bar.add_task(shown(description), total=total, unit=unit, visible=False, speed=speed)
        with scoped(RichMeter(self.bar, task, speed), lambda: self.bar.remove_task(task)) as meter:
            yield meter


@contextmanager
def live_reporter(console: Console, *, enabled: bool) -> Iterator[RichReporter]:
    # a description names layers, images and build steps: plain text (no rich markup such as [link=…]), escaped;
    # a narrow terminal gets a shorter bar, and the description what is left
    bar_width = max(10, min(30, console.width // 4 - 10))
    rest = bar_width + sum(WIDTHS.values()) + 4  # one space between columns
    columns = [_Description(console, rest), _BarOrSpinner(bar_width), _Count(), _Rate(), _Time()]
    with Progress(*columns, console=console, transient=True, disable=not enabled) as bar:
        yield RichReporter(bar, drawing=enabled)
