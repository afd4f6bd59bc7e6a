"""The project's prose as tests read it: the README (the front page) and the docs site's pages, one text, so a
test of what the docs show does not care on which page it stands."""

from __future__ import annotations

from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@cache
def text() -> str:
    return "\n\n".join(page.read_text() for page in pages())


def between(start: str, end: str) -> str:
    """The text from the first ``start`` up to the next ``end`` after it."""
    whole = text()
    first = whole.index(start)
    return whole[first:whole.index(end, first)]
