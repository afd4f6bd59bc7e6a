"""Shared test plumbing: golden files, and a cache dir of the test session's own.

Golden files live in ``tests/golden/``. ``pytest --update-golden`` rewrites them from the current output;
review the diff before committing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"
pytest_plugins = ["tests.diskwatch", "tests.timing", "tests.realrun"]


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


# The user's defaults (README, Configuration) would change what the tests' jobs ask for: none apply here
_DEFAULTS = ("CKIT_CONFIG", "CKIT_SITE", "SBATCH_ACCOUNT", "SBATCH_PARTITION", "SBATCH_TIMELIMIT",
             "CKIT_STORE_MAX_SIZE", "CKIT_RECIPES_PATH", "CKIT_SITES_PATH")


@pytest.fixture(scope="session", autouse=True)
def _no_user_defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No config file of the user's, and none of the environment variables that set defaults."""
    saved = {name: os.environ.pop(name) for name in (*_DEFAULTS, "XDG_CONFIG_HOME") if name in os.environ}
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config-home"))
    yield
    os.environ.pop("XDG_CONFIG_HOME", None)
    os.environ.update(saved)


@pytest.fixture(scope="session", autouse=True)
def _session_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """ckit's cache (artifacts, remembered digests) lives in the session's temp dir, never the user's."""
    before = os.environ.get("CKIT_CACHE_DIR")
    os.environ["CKIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("ckit-cache"))
    yield
    if before is None:
        os.environ.pop("CKIT_CACHE_DIR", None)
    else:
        os.environ["CKIT_CACHE_DIR"] = before
