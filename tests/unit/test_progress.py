"""The progress contract: a meter never fails, even when it is called after its work ended.

A meter is a callback handed down to code that can still run once the ``with`` block that opened it has ended
(a layer read late, for the squashfs writer, reports through the reading's meter). Every reporter is held to
it here: the silent one, and the terminal's drawn, hidden (``-q``, not a terminal) and concurrent cases.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest
from rich.console import Console

from buildkit.commands.progress_bars import Speedometer, live_reporter, time_text
from buildkit.progress import SILENT, Meter, Reporter, scoped


@contextmanager
def silent() -> Iterator[Reporter]:
    yield SILENT


def drawn(enabled: bool) -> Callable[[], AbstractContextManager[Reporter]]:
    def make() -> AbstractContextManager[Reporter]:
        console = Console(file=io.StringIO(), force_terminal=enabled, width=120)
        return live_reporter(console, enabled=enabled)

    return make


REPORTERS = {"silent": silent, "terminal": drawn(True), "hidden": drawn(False)}


def report_everything(meter: Meter) -> None:
    meter(5)
    meter.total(10, completed=1)
    meter.total(None)
    meter.describe("late work")


@pytest.mark.parametrize("name", sorted(REPORTERS))
def test_a_meter_called_after_its_work_ended_does_nothing(name: str) -> None:
    with REPORTERS[name]() as reporter:
        with reporter.meter("reading layers") as reading:
            reading(3)
        with reporter.meter("writing .sqsh", total=100) as writing:
            report_everything(reading)  # before: KeyError (rich's task is gone) on the terminal and with -q
            writing(40)
            if hasattr(reporter, "bar"):
                [task] = reporter.bar.tasks  # the late reports reached no line, and made none
                assert (task.description, task.completed, task.total) == ("writing .sqsh", 40, 100)
        report_everything(reading)
        report_everything(writing)
    report_everything(reading)  # and once the whole display is gone


def test_reports_from_threads_while_the_work_ends_never_fail() -> None:
    failures: list[BaseException] = []
    with drawn(False)() as reporter:
        with reporter.meter("reading layers") as meter:
            started = threading.Barrier(3)

            def worker() -> None:
                started.wait()
                try:
                    for _ in range(20000):
                        meter(1)
                except BaseException as err:  # noqa: BLE001 - collected for the assertion
                    failures.append(err)

            threads = [threading.Thread(target=worker) for _ in range(2)]
            for thread in threads:
                thread.start()
            started.wait()
        for thread in threads:
            thread.join()
    assert failures == []


def test_scoped_passes_calls_on_until_the_end_and_removes_the_display_after() -> None:
    calls: list[object] = []

    class Target:
        def __call__(self, done: int) -> None:
            calls.append(done)

        def total(self, total: int | None, *, completed: int | None = None) -> None:
            calls.append(("total", total, completed))

        def describe(self, text: str) -> None:
            calls.append(text)

    with scoped(Target(), lambda: calls.append("removed")) as meter:
        report_everything(meter)
    report_everything(meter)
    assert calls == [5, ("total", 10, 1), ("total", None, None), "late work", "removed"]


# --- what a line shows: the bar at 80 columns, an ETA that moves ------------------------------------------------

def _lines(width: int, description: str) -> list[str]:
    console = Console(file=io.StringIO(), force_terminal=True, width=width, color_system=None)
    with live_reporter(console, enabled=True) as reporter, reporter.meter(description, total=10**9) as meter:
        meter(3 * 10**8)
        table = Console(file=io.StringIO(), width=width, color_system=None)
        table.print(reporter.bar.make_tasks_table(reporter.bar.tasks))  # type: ignore[attr-defined]
        return table.file.getvalue().splitlines()  # type: ignore[attr-defined]


@pytest.mark.parametrize("width", [80, 120])
def test_a_long_description_is_cut_and_the_bar_stays_on_the_line(width: int) -> None:
    step = "step 4/9: RUN pip install --no-cache-dir torch==2.3.1 torchvision numpy scipy pandas"
    lines = _lines(width, step)
    assert len(lines) == 1 and len(lines[0]) <= width, lines
    assert "━" in lines[0] and "300.0 MB/1.0 GB" in lines[0] and "eta " in lines[0]
    assert lines[0].startswith("step 4/9: RUN pip") and "…" in lines[0]


def test_the_rate_decays_while_nothing_arrives_and_the_line_says_stalled() -> None:
    now = [0.0]
    speed = Speedometer(window=10, clock=lambda: now[0])
    assert speed.rate() is None and speed.stalled_for() is None
    for _ in range(5):
        now[0] += 1
        speed.add(20)
    assert speed.rate() == 20.0 and speed.stalled_for() is None  # 100 units over 5 s
    now[0] = 8.0
    assert speed.rate() == 12.5 and speed.stalled_for() is None  # the pause counts: the ETA grows
    now[0] = 10.0
    assert speed.stalled_for() == 5.0
    now[0] = 40.0
    assert speed.rate() == 0.0 and speed.stalled_for() == 35.0

    class _Task:
        total, completed, elapsed, time_remaining = 1000.0, 100.0, 40.0, 9.0
        fields = {"speed": speed}

    assert time_text(_Task()) == "stalled 0:00:35"  # type: ignore[arg-type]
    speed.add(50)
    assert time_text(_Task()) == "eta 0:03:00"  # type: ignore[arg-type]  # 900 left at 50 units / 10 s
