"""The benchmark figures of docs/benchmarks.md, kept as recorded results in ``docs/benchmarks.yaml`` and shown as a
table and a plot each: ``<!-- benchmark: NAME -->`` in the page becomes table NAME and its plot at every build.

A result cell is the table's text. Its leading figures are what the plot shows: ``0.57× (5.1 s against 9.0 s)``
plots 0.57, ``7.7–8.8×`` the range, ``1.00–1.05× / 1.45–1.58×`` and ``1.07×, 1.09×`` two values (the table says
what each is); a cell that starts with words (``about 1 s``) is not plotted. A target ``≥ 8×``, ``≤ 1.2×`` or
``< 150 MB`` is what the plot measures against; a figure without one (``–``) is in the table only."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

RESULTS = Path(__file__).parent / "benchmarks.yaml"
MARKER = re.compile(r"^<!-- benchmark: ([a-z-]+) -->$", re.MULTILINE)
_NUMBER = r"\d+(?:\.\d+)?"
_TARGET = re.compile(rf"^(≥|≤|<) ({_NUMBER}) ?(×|s|MB)$")
_VALUE = re.compile(rf"^({_NUMBER})(?:–({_NUMBER}))? ?(×|s|MB)?$")
_COLOURS = ["#3f6cb4", "#e07b39", "#2e7d32", "#8e44ad", "#b08a1e"]
_SHAPES = ["o", "s", "^"]


@dataclass(frozen=True)
class Target:
    bound: str  # ≥ (at least), ≤ or < (at most)
    goal: float

    def against(self, value: float) -> float:
        """``value`` measured against the target: at most 1 where it holds, whichever way the target points."""
        return self.goal / value if self.bound == "≥" else value / self.goal


def load() -> dict[str, Any]:
    tables: dict[str, Any] = yaml.safe_load(RESULTS.read_text())
    return tables


def target(text: str) -> Target | None:
    found = _TARGET.match(text.strip())
    return Target(found[1], float(found[2])) if found else None


def values(cell: str) -> list[tuple[float, float]]:
    """The (low, high) figures at the head of a result cell, in the order the cell gives them."""
    head = re.sub(r"\([^)]*\)", "", cell).strip()
    found = []
    for part in re.split(r" / |, ", head):
        match = _VALUE.match(part.strip())
        if match is None:
            break
        low = float(match[1])
        found.append((low, float(match[2]) if match[2] else low))
    return found


def table_markdown(table: dict[str, Any]) -> str:
    columns = table["columns"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in table["rows"]]
    return "\n".join(lines)


def plotted(table: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``table`` the plot shows: a target and at least one figure."""
    return [row for row in table["rows"] if target(row["target"])
            and any(values(str(row[run])) for run in table["runs"])]


def _label(row: dict[str, Any]) -> str:
    return textwrap.fill(str(row.get("label") or row["figure"]).replace("`", ""), 58)


def _draw_row(axes: Any, y: int, row: dict[str, Any], runs: list[str]) -> None:
    goal = target(row["target"])
    assert goal is not None
    for index, run in enumerate(runs):
        for part, (low, high) in enumerate(values(str(row[run]))):
            ys = y + 0.16 * (index - (len(runs) - 1) / 2)
            near, far = sorted((goal.against(low), goal.against(high)))
            colour = _COLOURS[index % len(_COLOURS)]
            if far > near:
                axes.plot([near, far], [ys, ys], color=colour, linewidth=2.2, solid_capstyle="round")
            axes.plot([(near * far) ** 0.5], [ys], marker=_SHAPES[part % len(_SHAPES)], color=colour,
                      markersize=5, linestyle="none", label=run if part == 0 else None)


def plot(name: str, table: dict[str, Any]) -> bytes:
    """Each figure with a target as measured / target on a log scale: left of 1 the target holds."""
    from pictures import plotting, svg_of

    plt = plotting()
    from matplotlib import ticker

    rows = plotted(table)
    figure, axes = plt.subplots(figsize=(8.6, 0.5 * len(rows) + 0.9))
    for y, row in enumerate(rows):
        _draw_row(axes, y, row, table["runs"])
    axes.set_xscale("log")
    low, high = axes.get_xlim()
    axes.set_xlim(min(low, 0.5), max(high, 2))
    axes.xaxis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))
    axes.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{x:g}"))
    axes.xaxis.set_minor_formatter(ticker.NullFormatter())
    axes.axvspan(axes.get_xlim()[0], 1, color="#e8f5e9", zorder=0)
    axes.axvline(1, color="#2e7d32", linewidth=1)
    axes.set_yticks(range(len(rows)), [_label(r) for r in rows], fontsize=7.5)
    axes.set_ylim(len(rows) - 0.5, -0.5)
    axes.set_xlabel("measured / target (for a ≥ target: target / measured); green, at most 1: the target holds\n"
                    "a line is a range; a square is a cell's second value (as the table says: four layers, random "
                    "order)", fontsize=7.5)
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if len(unique) > 1:
        axes.legend(unique.values(), unique.keys(), fontsize=7.5, loc="lower center", frameon=False,
                    bbox_to_anchor=(0.5, 1.0), ncol=len(unique))
    return svg_of(figure)


def plots() -> dict[str, Any]:
    """Every benchmark plot by its path in the site."""
    return {f"img/bench-{name}.svg": (lambda n=name, t=table: plot(n, t)) for name, table in load().items()
            if plotted(table)}


def page(markdown: str) -> str:
    """docs/benchmarks.md with every marker replaced by its table and, where it has one, its plot."""
    tables = load()

    def expand(found: re.Match[str]) -> str:
        name = found[1]
        if name not in tables:
            raise ValueError(f"docs/benchmarks.md: {found[0]} names no table of {RESULTS.name}")
        shown = table_markdown(tables[name])
        if plotted(tables[name]):
            shown += f"\n\n![{name}: each figure against its target](img/bench-{name}.svg)"
        return shown
    return MARKER.sub(expand, markdown)
