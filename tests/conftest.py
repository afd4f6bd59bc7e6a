"""Shared test plumbing: golden files.

Golden files live in ``tests/golden/``. ``pytest --update-golden`` rewrites them from the current output;
review the diff before committing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/* from current output")


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """``golden("dir/name.ext", text)`` asserts ``text`` equals the stored golden file."""
    update = request.config.getoption("--update-golden")

    def check(name: str, text: str) -> None:
        path = GOLDEN_DIR / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        assert path.is_file(), f"missing golden file {path}; run pytest --update-golden and review it"
        expected = path.read_text(encoding="utf-8")
        assert text == expected, f"output differs from {path} (pytest --update-golden rewrites it)"

    return check
