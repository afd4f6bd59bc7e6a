"""Run every ``tests/bench/bench_*.py`` (or the ones named on the command line) and print a table.

    python -m tests.bench [NAME ...]      # NAME: "convert" for bench_convert.py

Exit status 1 when a module fails to run; targets that are missed are shown, not fatal.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback
from pathlib import Path

from . import BenchResult

HERE = Path(__file__).parent


def discover(names: list[str]) -> list[str]:
    found = sorted(p.stem for p in HERE.glob("bench_*.py"))
    if names:
        wanted = {n if n.startswith("bench_") else f"bench_{n}" for n in names}
        unknown = wanted - set(found)
        if unknown:
            raise SystemExit(f"unknown benchmark module(s): {', '.join(sorted(unknown))}; known: {', '.join(found)}")
        found = [f for f in found if f in wanted]
    return found


def fmt_value(result: BenchResult) -> str:
    if result.unit == "x":  # two significant digits below 0.1: a ratio of 0.004 is not "0.00x"
        return f"{result.value:.2f}x" if result.value >= 0.1 else f"{result.value:.2g}x"
    return f"{result.value:.3g} {result.unit}"


def table(rows: list[tuple[str, BenchResult]]) -> str:
    header = ("module", "benchmark", "value", "target", "ok", "detail")
    lines = [header] + [
        (module, r.name, fmt_value(r), r.target or "-", {True: "yes", False: "NO", None: "-"}[r.ok], r.detail)
        for module, r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    out = []
    for n, line in enumerate(lines):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=False)) + "  " + line[-1])
        if n == 0:
            out.append("  ".join("-" * w for w in widths) + "  ------")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    rows: list[tuple[str, BenchResult]] = []
    failed = []
    for module_name in discover(argv):
        began = time.monotonic()
        print(f"== {module_name} ...", file=sys.stderr, flush=True)
        try:
            module = importlib.import_module(f"tests.bench.{module_name}")
            results = module.run()
        except Exception:  # a broken benchmark must not hide the others
            traceback.print_exc()
            failed.append(module_name)
            continue
        rows += [(module_name.removeprefix("bench_"), r) for r in results]
        print(f"== {module_name}: {time.monotonic() - began:.1f} s", file=sys.stderr, flush=True)
    print(table(rows))
    if failed:
        print(f"failed to run: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
