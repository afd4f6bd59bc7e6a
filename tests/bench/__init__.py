"""Benchmarks run by ``make bench`` (``python -m tests.bench``), outside pytest.

Each ``tests/bench/bench_*.py`` module exposes ``run() -> list[BenchResult]`` and starts the components it
needs itself (``tests.infra.components``). ``__main__`` runs them all and prints one table.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Any


def sh(*argv: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` (an argv list, never a shell), output discarded unless ``stdout`` is given; a failure raises
    with its stderr kept."""
    kw.setdefault("stdout", subprocess.DEVNULL)
    return subprocess.run(argv, check=True, stderr=subprocess.PIPE, **kw)  # noqa: S603


@dataclass(frozen=True)
class BenchResult:
    """One measurement: ``value`` in ``unit`` (a ratio is unit "x"), checked against ``target`` when set."""

    name: str
    value: float
    unit: str = "x"
    target: str = ""  # e.g. "<= 1.2", ">= 8", "" (informational)
    detail: str = ""

    @property
    def ok(self) -> bool | None:
        if not self.target:
            return None
        op, _, bound = self.target.partition(" ")
        limit = float(bound)
        return {"<=": self.value <= limit, ">=": self.value >= limit, "<": self.value < limit,
                ">": self.value > limit}[op]
