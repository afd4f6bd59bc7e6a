"""The terminal side of :mod:`buildkit.progress`: one rich display per command, one line per meter.

A line shows what is being done, then either a bar, the count, the rate and the time left (when the total
is known) or a spinner, the count, the rate and the time spent (when it is not): never a made-up total, an
ETA without a total, or a count that disagrees with the description. A meter appears with its first news
(so work that never reports leaves nothing stale on screen) and disappears when its work ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.filesize import decimal
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TaskID, TextColumn
from rich.text import Text

from ..outside import shown
from ..progress import Meter, Unit, scoped


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
    """``eta 0:01:05`` when the total is known (``eta -:--:--`` until a rate is measured), else the time spent."""
    if task.total is None:
        return clock(task.elapsed)
    return "eta " + clock(task.time_remaining)


class _BarOrSpinner(ProgressColumn):
    def __init__(self) -> None:
        super().__init__()
        self.bar, self.spinner = BarColumn(bar_width=30), SpinnerColumn(finished_text=" ")

    def render(self, task: Task) -> Any:
        return self.spinner.render(task) if task.total is None else self.bar.render(task)


class _Count(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(count_text(task.completed, task.total, task.fields.get("unit", "bytes")),
                    style="progress.download")


class _Rate(ProgressColumn):
    def render(self, task: Task) -> Text:
        if task.fields.get("unit") != "bytes":
            return Text("")
        speed = task.finished_speed or task.speed
        return Text(f"{decimal(int(speed))}/s" if speed else "", style="progress.data.speed")


class _Time(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(time_text(task), style="progress.remaining")


class RichMeter:
    """A :class:`~buildkit.progress.Meter` that is one task line of a rich Progress, while the line exists
    (:func:`~buildkit.progress.scoped` keeps later calls from it: rich raises for a task it removed)."""

    def __init__(self, bar: Progress, task: TaskID) -> None:
        self.bar, self.task = bar, task

    def __call__(self, done: int) -> None:
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
        task = self.bar.add_task(shown(description), total=total, unit=unit, visible=False)
        with scoped(RichMeter(self.bar, task), lambda: self.bar.remove_task(task)) as meter:
            yield meter


@contextmanager
def live_reporter(console: Console, *, enabled: bool) -> Iterator[RichReporter]:
    # a description names layers, images and build steps: plain text (no rich markup such as [link=…]), escaped
    columns = [TextColumn("{task.description}", markup=False), _BarOrSpinner(), _Count(), _Rate(), _Time()]
    with Progress(*columns, console=console, transient=True, disable=not enabled) as bar:
        yield RichReporter(bar, drawing=enabled)
