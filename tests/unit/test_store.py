"""The artifact store: keys, atomic publish, verification on read, locks, export."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from buildkit.errors import ConfigError, ConvertError
from buildkit.storage.store import FORMAT_VERSION, Store, default_root, export, make_key


def ok(path: Path) -> None:
    if not path.read_bytes().startswith(b"GOOD"):
        raise ConvertError(f"{path}: bad")


def test_key_depends_on_every_option() -> None:
    base = make_key(source_digest="sha256:a", target="sif", compression="zstd:3")
    assert base == make_key(compression="zstd:3", target="sif", source_digest="sha256:a")
    assert base == make_key(source_digest="sha256:a", target="sif", compression="zstd:3", format_version=FORMAT_VERSION)
    assert len({base, make_key(source_digest="sha256:b", target="sif", compression="zstd:3"),
                make_key(source_digest="sha256:a", target="sqsh", compression="zstd:3"),
                make_key(source_digest="sha256:a", target="sif", compression="gzip:1"),
                make_key(source_digest="sha256:a", target="sif", compression="zstd:3", format_version=99)}) == 5


def test_cache_dir_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CKIT_CACHE_DIR", str(tmp_path / "c"))
    assert default_root() == tmp_path / "c"
    assert Store().root == tmp_path / "c"
    monkeypatch.delenv("CKIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_root() == tmp_path / "xdg" / "ckit"


def test_publish_then_get_and_verify(tmp_path: Path) -> None:
    store = Store(tmp_path)
    key = make_key(source_digest="sha256:a", target="sqsh")
    assert store.get(key, "sqsh", ok) is None
    temp = store.temp_path(key, "sqsh")
    temp.write_bytes(b"GOOD data")
    entry = store.publish(key, "sqsh", temp, {"target": "sqsh", "source": "x"}, ok)
    assert entry.path == tmp_path / "artifacts" / f"{key}.sqsh" and not temp.exists()
    again = store.get(key, "sqsh", ok)
    assert again is not None and again.meta["size"] == 9 and again.meta["source"] == "x"
    assert [e.key for e in store.entries()] == [key]


def test_failed_verification_publishes_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path)
    key = make_key(source_digest="sha256:a", target="sif")
    temp = store.temp_path(key, "sif")
    temp.write_bytes(b"BAD")
    with pytest.raises(ConvertError):
        store.publish(key, "sif", temp, {"target": "sif"}, ok)
    assert sorted(p.name for p in (tmp_path / "artifacts").iterdir()) == []


def test_corrupted_artifact_is_a_miss_and_removed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    key = make_key(source_digest="sha256:a", target="sqsh")
    temp = store.temp_path(key, "sqsh")
    temp.write_bytes(b"GOOD data")
    entry = store.publish(key, "sqsh", temp, {"target": "sqsh"}, ok)
    entry.path.write_bytes(b"BAD! data")  # same size, wrong content
    assert store.get(key, "sqsh", ok) is None
    assert not entry.path.exists()


def test_clean_temps_removes_only_that_keys_leftovers(tmp_path: Path) -> None:
    store = Store(tmp_path)
    a, b = make_key(source_digest="sha256:a"), make_key(source_digest="sha256:b")
    stale_a, stale_b = store.temp_path(a, "sqsh"), store.temp_path(b, "sqsh")
    # an atomic writer of the temp artifact (the SIF writer) puts its own temp file next to it
    nested_a = stale_a.with_name(f".{stale_a.name}.x1y2z3.tmp")
    nested_a.write_bytes(b"partial")
    store.clean_temps(a)
    assert not stale_a.exists() and not nested_a.exists() and stale_b.exists()


def test_lock_serialises_holders_of_one_key(tmp_path: Path) -> None:
    store = Store(tmp_path)
    order: list[str] = []

    def hold(name: str) -> None:
        with store.lock("k"):
            order.append(f"{name}-in")
            time.sleep(0.2)
            order.append(f"{name}-out")

    threads = [threading.Thread(target=hold, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join()
    first, second = order[0][0], order[2][0]  # whichever thread won the lock: no interleaving
    assert order == [f"{first}-in", f"{first}-out", f"{second}-in", f"{second}-out"] and first != second


def test_workdir_is_emptied_before_and_after(tmp_path: Path) -> None:
    store = Store(tmp_path)
    (tmp_path / "work" / "k").mkdir(parents=True)
    (tmp_path / "work" / "k" / "stale").write_text("left by a killed run")
    with store.workdir("k") as work:
        assert list(work.iterdir()) == []
        (work / "spool").write_text("x")
    assert not (tmp_path / "work" / "k").exists()


def test_export_is_atomic_and_replaces(tmp_path: Path) -> None:
    src = tmp_path / "src.sif"
    src.write_bytes(b"GOOD artifact")
    dest = tmp_path / "out" / "x.sif"
    export(src, dest)
    assert dest.read_bytes() == b"GOOD artifact"
    src2 = tmp_path / "src2.sif"
    src2.write_bytes(b"GOOD newer")
    export(src2, dest)
    assert dest.read_bytes() == b"GOOD newer"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["x.sif"]


def test_a_read_error_is_a_miss_that_deletes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared store: one node's transient I/O error must not delete the artifact every node uses."""
    store = Store(tmp_path)
    key = make_key(source_digest="sha256:a", target="sqsh")
    temp = store.temp_path(key, "sqsh")
    temp.write_bytes(b"GOOD")
    store.publish(key, "sqsh", temp, {"target": "sqsh"}, ok)

    def eio(fd: int, size: int) -> bytes:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "read", eio)
    assert store.get(key, "sqsh", ok) is None
    monkeypatch.undo()
    assert store.get(key, "sqsh", ok) is not None


def test_records_are_readable_by_every_user_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        store = Store(tmp_path)
        key = make_key(source_digest="sha256:u", target="sqsh")
        temp = store.temp_path(key, "sqsh")
        temp.write_bytes(b"GOOD")
        entry = store.publish(key, "sqsh", temp, {"target": "sqsh"}, ok)
    finally:
        os.umask(old)
    assert entry.path.stat().st_mode & 0o777 == 0o644
    assert (store.artifacts / f"{key}.json").stat().st_mode & 0o777 == 0o644


def test_a_store_is_its_users_alone(tmp_path: Path) -> None:
    """A store folder of this user's that others could write is closed to them before anything goes in; another
    user's folder is refused (exit 2), nothing written."""
    mine = tmp_path / "mine"
    mine.mkdir()
    mine.chmod(0o2777)
    Store(mine).temp_path("a" * 64, "sqsh")
    for folder in (mine, mine / "artifacts", mine / "locks", mine / "work"):
        assert folder.stat().st_mode & 0o022 == 0, folder
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(ConfigError, match="belongs to uid 65534"):
        Store(theirs).temp_path("a" * 64, "sqsh")
    assert list(theirs.iterdir()) == []
