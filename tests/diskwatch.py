"""How low the disk got during the run, and in which test: printed at the end of every run.

The integration tests build multi-GB images (podman stages each new layer twice in /var/tmp while it commits it),
so a machine with little free disk fails them with ENOSPC; this line says how much a run needed and where.
A thread samples the free space of the file systems the run writes to, every half second.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field

import pytest

PERIOD = 0.5


@dataclass
class DiskWatch:
    paths: tuple[str, ...]
    current: str = "(collection)"
    start: dict[str, int] = field(default_factory=dict)
    least: dict[str, tuple[int, str]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        for path in self.paths:
            try:
                free = shutil.disk_usage(path).free
            except OSError:
                continue
            self.start.setdefault(path, free)
            if path not in self.least or free < self.least[path][0]:
                self.least[path] = (free, self.current)

    def loop(self) -> None:
        while not self.stop.wait(PERIOD):
            self.sample()


KEY = pytest.StashKey[DiskWatch]()


def _paths() -> tuple[str, ...]:
    """One path per file system among the run dir, the temp dir and /var/tmp (podman's staging)."""
    seen: dict[int, str] = {}
    for path in (os.environ.get("CKIT_RUN_DIR", "."), tempfile.gettempdir(), "/var/tmp"):
        try:
            seen.setdefault(os.stat(path).st_dev, path)
        except OSError:
            continue
    return tuple(seen.values())


def pytest_configure(config: pytest.Config) -> None:
    watch = DiskWatch(_paths())
    watch.sample()
    config.stash[KEY] = watch
    threading.Thread(target=watch.loop, name="diskwatch", daemon=True).start()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> None:
    watch = item.config.stash.get(KEY, None)
    if watch is not None:
        watch.current = item.nodeid


def pytest_unconfigure(config: pytest.Config) -> None:
    watch = config.stash.get(KEY, None)
    if watch is not None:
        watch.stop.set()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    watch = config.stash.get(KEY, None)
    if watch is None:
        return
    watch.sample()
    for path, (free, test) in watch.least.items():
        terminalreporter.write_line(f"disk ({path}): {watch.start[path] / 2**30:.1f} GiB free at the start, "
                                    f"least {free / 2**30:.1f} GiB, during {test}")
