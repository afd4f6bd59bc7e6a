"""The one rule that prunes the store's reuse folder: a record lives while its artifact does (the same file as
published), a members file while a living record names it; young files wait for the next sweep."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from buildkit.storage import reuse_files as F
from buildkit.storage.store import Store

OLD = time.time() - 3600


def _artifact(store: Store, name: str) -> tuple[int, int, int]:
    path = store.artifacts / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"hsqs" + bytes(200))
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


def _members(store: Store, layer: str, body: bytes = b"members", *, age: float = OLD) -> str:
    sha = hashlib.sha256(body).hexdigest()
    path = store.root / "reuse" / F.members_name(layer)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(F.MEMBERS_MAGIC + sha.encode() + b"\n" + body)
    os.utime(path, (age, age))
    return sha


def _record(store: Store, name: str, refs: F.ReuseRefs, *, age: float = OLD) -> None:
    path = store.root / "reuse" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(F.frame_record(refs, b"body"))
    os.utime(path, (age, age))


def _layer(n: int) -> str:
    return "sha256:" + f"{n:x}" * 64


def _left(store: Store) -> list[str]:
    return sorted(p.name for p in (store.root / "reuse").iterdir())


def test_refs_round_trip_and_bad_ones_are_refused() -> None:
    refs = F.ReuseRefs(_layer(1), "a" * 64 + ".sqsh", (1, 2, 3), "b" * 64)
    raw = F.frame_record(refs, b"packed body")
    assert F.record_refs(raw) == (refs, b"packed body")
    assert F.record_refs(raw[:400], verify=False)[0] == refs  # a sweep reads only the head
    with pytest.raises(ValueError, match="digest"):
        F.record_refs(raw[:-1] + b"X")
    for bad in (F.ReuseRefs(_layer(1), "../../etc/passwd", (1, 2, 3), "b" * 64),
                F.ReuseRefs("latest", "a" * 64 + ".sqsh", (1, 2, 3), "b" * 64),
                F.ReuseRefs(_layer(1), "a" * 64 + ".sqsh", (1, 2, -3), "b" * 64)):
        with pytest.raises(ValueError, match="malformed"):
            F.record_refs(F.frame_record(bad, b""))


def test_what_no_living_artifact_needs_goes_and_what_one_needs_stays(tmp_path: Path) -> None:
    store = Store(tmp_path)
    live, dead = "1" * 64 + ".sqsh", "2" * 64 + ".sif"
    live_stat, dead_stat = _artifact(store, live), _artifact(store, dead)
    (store.artifacts / dead).unlink()
    shared, only_dead = _members(store, _layer(1)), _members(store, _layer(2))
    _record(store, "r1.rec", F.ReuseRefs(_layer(1), live, live_stat, shared))  # lives
    _record(store, "r2.rec", F.ReuseRefs(_layer(1), dead, dead_stat, shared))  # its artifact is gone
    _record(store, "r3.rec", F.ReuseRefs(_layer(2), dead, dead_stat, only_dead))
    _record(store, "r4.rec", F.ReuseRefs(_layer(1), live, (live_stat[0], live_stat[1], 5), shared))  # replaced
    _record(store, "r5.rec", F.ReuseRefs(_layer(3), live, live_stat, "c" * 64))  # its members file is gone
    (store.root / "reuse" / "r6.rec").write_bytes(b"ckit-reuse 2\nnot this format")
    leftover = store.root / "reuse" / ".abc.tmp"
    leftover.write_bytes(b"half")
    os.utime(leftover, (OLD, OLD))
    dry = store.sweep_reuse(dry_run=True)
    assert sorted(dry.removed) == sorted([".abc.tmp", F.members_name(_layer(2)), "r2.rec", "r3.rec", "r4.rec",
                                          "r5.rec", "r6.rec"])
    assert len(_left(store)) == 9  # a dry run removes nothing
    swept = store.sweep_reuse()
    assert swept.as_json()["removed_records"] == 5 and swept.as_json()["removed_members"] == 1
    assert swept.freed == dry.freed > 0 and swept.kept == 2
    assert _left(store) == sorted([F.members_name(_layer(1)), "r1.rec"])
    assert store.sweep_reuse().removed == []


def test_young_files_wait_for_the_next_sweep(tmp_path: Path) -> None:
    """A producer writes a layer's members file just before its record, and touches one it names again."""
    store = Store(tmp_path)
    live = "1" * 64 + ".sqsh"
    stat = _artifact(store, live)
    _members(store, _layer(1), age=time.time())  # written, its record not yet
    _record(store, "r.rec", F.ReuseRefs(_layer(2), live, stat, "d" * 64), age=time.time())  # its members: not listed
    assert store.sweep_reuse(grace=60).removed == []
    assert sorted(store.sweep_reuse(grace=0).removed) == sorted([F.members_name(_layer(1)), "r.rec"])


def test_gone_counts_artifacts_as_removed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    name = "1" * 64 + ".sqsh"
    _record(store, "r.rec", F.ReuseRefs(_layer(1), name, _artifact(store, name), _members(store, _layer(1))))
    assert store.sweep_reuse(dry_run=True).removed == []
    assert sorted(store.sweep_reuse(gone={name}, dry_run=True).removed) == sorted([F.members_name(_layer(1)), "r.rec"])


def test_a_store_without_reuse_files_sweeps_to_nothing(tmp_path: Path) -> None:
    assert Store(tmp_path / "none").sweep_reuse().as_json() == {
        "removed_records": 0, "removed_members": 0, "freed_bytes": 0, "kept_files": 0, "kept_bytes": 0}


def test_a_record_replaced_while_the_sweep_judged_it_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer renames a new version into place (pointing at its new output) after the sweep read the old one."""
    store = Store(tmp_path)
    old, new = "1" * 64 + ".sqsh", "2" * 64 + ".sqsh"
    old_stat, new_stat = _artifact(store, old), _artifact(store, new)
    (store.artifacts / old).unlink()
    members = _members(store, _layer(1))
    _record(store, "r.rec", F.ReuseRefs(_layer(1), old, old_stat, members))
    real = F._head_refs

    def racing(path: Path) -> F.ReuseRefs | None:
        refs = real(path)
        fresh = path.with_name(".r.tmp")
        fresh.write_bytes(F.frame_record(F.ReuseRefs(_layer(1), new, new_stat, members), b"body"))
        fresh.replace(path)
        return refs

    monkeypatch.setattr(F, "_head_refs", racing)
    assert store.sweep_reuse(grace=0).removed == []
    monkeypatch.undo()
    assert F.record_refs((store.root / "reuse" / "r.rec").read_bytes())[0].artifact == new
