"""Unit tests cover pure code only: starting a process here is a test bug."""

from __future__ import annotations

import subprocess

import pytest


@pytest.fixture(autouse=True)
def _no_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"unit tests must not start processes: {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
