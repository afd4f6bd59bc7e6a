"""Benchmarks run by ``make bench`` (``python -m tests.bench``), outside pytest.

Each ``tests/bench/bench_*.py`` module exposes ``run() -> list[BenchResult]`` and starts the components it
needs itself (``tests.infra.components``). ``__main__`` runs them all and prints one table.
"""

from __future__ import annotations

from dataclasses import dataclass


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
