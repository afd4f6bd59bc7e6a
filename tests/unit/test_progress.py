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

from buildkit.commands.progress_bars import live_reporter
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
