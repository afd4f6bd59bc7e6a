"""Unit tests cover pure code only: starting a process here is a test bug, and so is reading what an earlier test
left in the session's cache (job records, artifacts): each test has a cache of its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _no_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"unit tests must not start processes: {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "Popen", refuse)


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CKIT_CACHE_DIR", str(tmp_path / "ckit-cache"))
