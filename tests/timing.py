"""Where a run's time went: at its end, the seconds each test module took (setup, call and teardown of its tests,
so a module's share of the components and images it builds counts too), slowest first. pytest's own
``--durations=30`` (the Makefile passes it) lists the slowest single tests above it."""

from __future__ import annotations

from collections import defaultdict

import pytest

SHOWN = 30


class ModuleTimes:
    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid.split("::", 1)[0]] += report.duration

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        total = sum(self.seconds.values())
        if total < 1.0:
            return
        terminalreporter.section(f"time per test module ({total / 60:.1f} min in tests)")
        ranked = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        for module, spent in ranked[:SHOWN]:
            terminalreporter.write_line(f"{spent:8.1f} s  {100 * spent / total:5.1f} %  {module}")
        if len(ranked) > SHOWN:
            rest = sum(spent for _, spent in ranked[SHOWN:])
            terminalreporter.write_line(f"{rest:8.1f} s  {100 * rest / total:5.1f} %  the other {len(ranked) - SHOWN} modules")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(ModuleTimes(), "ckit-module-times")
