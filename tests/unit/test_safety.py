"""The safety building blocks on their own: limits from the environment, the JSON reader, the output guard, stale
temp files, Retry-After, and the README's table of limits kept in step with the code."""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import time
from pathlib import Path

import pytest
import requests

from buildkit.config import jsondoc, limits
from buildkit.errors import ConfigError, IntegrityError
from buildkit.fs.files import atomic_write, check_output, clean_stale, read_capped
from buildkit.registry.distribution.transport import _retry_after
from buildkit.reproducible import source_date_epoch
from tests import doctext


def test_the_readme_lists_every_limit_with_its_default_and_meaning() -> None:
    table = doctext.between("<!-- limits:start -->", "<!-- limits:end -->")
    rows = re.findall(r"^\| `(CKIT_[A-Z_]+)` \| ([0-9.]+) \| (.+) \|$", table, re.M)
    expected = [(lim.env, f"{lim.default:g}" if not lim.integer else str(int(lim.default)), lim.meaning)
                for lim in limits.LIMITS.values()]
    assert rows == expected


def test_limits_come_from_the_environment_and_bad_values_are_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    assert limits.size("manifest_size") == 4 << 20
    monkeypatch.setenv("CKIT_MAX_MANIFEST_SIZE", "2048")
    assert limits.size("manifest_size") == 2048
    for bad in ("lots", "-1", "10", "1e99", "nan"):
        monkeypatch.setenv("CKIT_MAX_MANIFEST_SIZE", bad)
        with pytest.raises(ConfigError, match="CKIT_MAX_MANIFEST_SIZE"):
            limits.size("manifest_size")
    monkeypatch.setenv("CKIT_HTTP_TIMEOUT", "0.5")
    assert limits.get("http_timeout") == 0.5


@pytest.mark.parametrize("value", ["", "0", "4294967295"])
def test_source_date_epoch_in_range(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    assert source_date_epoch() == (int(value) if value else None)


@pytest.mark.parametrize("value", ["4294967296", "99999999999999999999", "-1", "1e9", "now"])
def test_source_date_epoch_out_of_range_is_bad_input(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    with pytest.raises(ConfigError, match="SOURCE_DATE_EPOCH"):
        source_date_epoch()


def test_json_nesting_and_types_are_checked_without_recursion() -> None:
    deep = "[" * 200_000 + "]" * 200_000
    with pytest.raises(IntegrityError, match="nests"):
        jsondoc.parse(deep, "doc", error=IntegrityError, expect=None)
    with pytest.raises(ConfigError, match="nests deeper than 100"):
        jsondoc.parse("[" * 150 + "]" * 150, "doc", expect=None)
    with pytest.raises(ConfigError, match="must be a JSON object, not a list"):
        jsondoc.parse("[1]", "doc")
    assert jsondoc.typed({"a": None}, "a", str, "doc", default="x") == "x"
    with pytest.raises(ConfigError, match="a must be a string, not a boolean"):
        jsondoc.typed({"a": True}, "a", str, "doc")
    with pytest.raises(ConfigError, match="a must be a number, not a boolean"):
        jsondoc.typed({"a": True}, "a", int, "doc")


def test_the_output_guard(tmp_path: Path) -> None:
    regular = tmp_path / "out.sif"
    regular.write_text("old")
    assert check_output(regular) == regular
    link = tmp_path / "link.sif"
    link.symlink_to(regular)
    assert check_output(link) == regular  # a symlink is followed: its target is replaced
    with pytest.raises(ConfigError, match="does not overwrite its input"):
        check_output(link, inputs=[regular])
    with pytest.raises(ConfigError, match="is a folder"):
        check_output(tmp_path)
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        check_output(regular / "x")
    with pytest.raises(ConfigError, match="too long"):
        check_output(tmp_path / ("x" * 256))
    with pytest.raises(ConfigError, match="part of the input"):
        check_output(regular, inputs=[tmp_path])
    assert check_output(tmp_path / "new" / "deeper" / "x.sif") == tmp_path / "new" / "deeper" / "x.sif"


def test_stale_temps_are_removed_only_when_no_writer_holds_them(tmp_path: Path) -> None:
    final = tmp_path / "app.sif"
    dead, alive = tmp_path / ".app.sif.dead.part", tmp_path / ".app.sif.live.part"
    for path in (dead, alive):
        path.write_bytes(b"partial")
        os.utime(path, (time.time() - 60, time.time() - 60))
    fd = os.open(alive, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a writer that is still running
    try:
        assert clean_stale(final, ".part") == 1
    finally:
        os.close(fd)
    assert not dead.exists() and alive.exists()
    atomic_write(final, b"new")  # every write of the output cleans up first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sif"]


def test_a_young_temp_of_a_dead_writer_is_removed_at_once(tmp_path: Path) -> None:
    """A pull killed a moment ago left its .part: the rerun removes it (a two-second grace left it there)."""
    final = tmp_path / "app.sif"
    (tmp_path / ".app.sif.young.part").write_bytes(b"written until the kill")
    atomic_write(final, b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sif"]


def test_a_writer_whose_new_temp_a_cleaner_removed_before_its_lock_makes_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window between a temp file's creation and its lock: a cleaner there sees no lock and removes it. The
    writer finds the path gone once it holds the lock, and writes through a new one."""
    final, made = tmp_path / "app.sif", []
    real = tempfile.mkstemp

    def made_then_cleaned(*args: object, **kwargs: object) -> tuple[int, str]:
        fd, name = real(*args, **kwargs)  # type: ignore[call-overload]
        made.append(name)
        if len(made) == 1:
            assert clean_stale(final, ".part") == 1  # another writer's cleaning, just before this one's lock
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", made_then_cleaned)
    atomic_write(final, b"whole")
    assert final.read_bytes() == b"whole" and len(made) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sif"]


def test_read_capped_reads_only_small_regular_files(tmp_path: Path) -> None:
    small = tmp_path / "a.yaml"
    small.write_bytes(b"x" * 10)
    assert read_capped(small, 10, "recipe") == b"x" * 10
    with pytest.raises(ConfigError, match="more than the 9"):
        read_capped(small, 9, "recipe")
    with pytest.raises(ConfigError, match="is a character device"):
        read_capped("/dev/zero", 10, "recipe")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is a FIFO"):
        read_capped(fifo, 10, "recipe")  # and the open did not block


@pytest.mark.parametrize("header, expected", [
    ("3", 3.0), ("", None), ("soon", None), ("-5", None), ("Wed, 21 Oct 1970 07:28:00 GMT", 0.0),
    ("\u00b2", None), ("\u00b9\u00b2", None),  # Latin-1 superscripts: isdigit() said yes, float() raised ValueError
])
def test_retry_after(header: str, expected: float | None) -> None:
    response = requests.Response()
    response.headers["Retry-After"] = header
    assert _retry_after(response) == expected
