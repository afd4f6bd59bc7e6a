"""``SOURCE_DATE_EPOCH`` is read in one place, one way."""

from __future__ import annotations

import pytest

from buildkit.errors import ConfigError
from buildkit.reproducible import source_date_epoch


@pytest.mark.parametrize("value, expected", [("", None), ("  ", None), ("0", 0), ("1700000000", 1700000000),
                                             (" 42 ", 42), ("4294967295", 4294967295)])
def test_accepted(value: str, expected: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    assert source_date_epoch() == expected


def test_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert source_date_epoch() is None


@pytest.mark.parametrize("value", ["soon", "-5", "1e9", "1.5", "4294967296", "١٢"])
def test_refused_with_a_hint(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    with pytest.raises(ConfigError, match="is not a number of seconds") as err:
        source_date_epoch()
    assert err.value.hint and "SOURCE_DATE_EPOCH" in err.value.hint
