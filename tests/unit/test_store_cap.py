"""Where converted images go: the name an image gets in a folder, never over a file that is not already it, and the
personal store kept under its size cap by evicting the least recently used artifacts that nothing uses."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from buildkit.api._outputs import cap_store, named_output, output_name, place_named
from buildkit.errors import ConfigError
from buildkit.storage import holds, personal
from buildkit.storage.lease import Lease
from buildkit.storage.store import Store, make_key


@pytest.mark.parametrize(("source", "target", "name"), [
    ("docker://ubuntu:22.04", "sif", "ubuntu_22.04.sif"),
    ("docker://nvcr.io/nvidia/pytorch:24.06-py3", "sqsh", "pytorch_24.06-py3.sqsh"),
    ("docker://busybox", "sif", "busybox_latest.sif"),
    ("docker://busybox@sha256:" + "ab" * 32, "sif", "busybox_abababababab.sif"),
    ("docker-daemon:localhost/ckit/demo:1a2b", "sqsh", "demo_1a2b.sqsh"),
    ("docker-archive:/tmp/img.tar", "sqsh", "img.sqsh"),
    ("oci:/tmp/layout:v1", "sif", "layout_v1.sif"),
    ("oci-archive:/tmp/x.tar:team/app:2", "sif", "app_2.sif"),
])
def test_an_image_is_named_as_apptainer_pull_names_it(source: str, target: str, name: str) -> None:
    assert output_name(source, target) == name


def _artifact(store: Store, name: str, size: int, used_ago: float | None = None) -> str:
    key = make_key(name=name)
    temp = store.temp_path(key, "sqsh")
    temp.write_bytes(b"x" * size)
    store.publish(key, "sqsh", temp, {"created": time.time(), "source": name}, lambda path: None)
    if used_ago is not None:
        holds.touch(store.root, key)
        then = time.time() - used_ago
        os.utime(store.root / "used" / key, (then, then))
    return key


def test_a_named_output_is_never_put_over_another_file(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    key = _artifact(store, "a", 10)
    artifact = store.path(key, "sqsh")
    target = named_output("docker://ubuntu:22.04", "sqsh", tmp_path)
    assert place_named(artifact, target) == target and os.path.samefile(target, artifact)
    assert place_named(artifact, named_output("docker://ubuntu:22.04", "sqsh", tmp_path)) == target  # again: same
    other = tmp_path / "busybox_latest.sqsh"
    other.write_bytes(b"mine")
    with pytest.raises(ConfigError, match="busybox_latest.sqsh exists") as err:
        named_output("docker://busybox", "sqsh", tmp_path)  # refused before any work
    assert f"-o {other}" in (err.value.hint or "")
    os.link(other, tmp_path / "a-link")  # a hard link of something else: refused once the artifact is known
    with pytest.raises(ConfigError, match="exists"):
        place_named(artifact, named_output("docker://busybox", "sqsh", tmp_path))
    assert other.read_bytes() == b"mine"


def test_the_store_evicts_the_least_recently_used_beyond_its_cap(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    old = _artifact(store, "old recipe", 400, used_ago=3600)
    held = _artifact(store, "held", 400, used_ago=7200)
    leased = _artifact(store, "leased", 400, used_ago=5400)
    newer = _artifact(store, "newer", 400, used_ago=600)
    recent = _artifact(store, "just made", 400)  # within the grace: another ckit may be copying it out
    holds.hold(store.root, held, "123.0@node")
    lease = Lease(store.locks / f"{leased}.lease")
    assert lease.try_acquire()
    try:
        assert [e.key for e in personal.evict(store, 1000, dry_run=True)] == [old, newer]
        assert len(store.entries()) == 5
        gone = personal.evict(store, 1000)
    finally:
        lease.release()
    assert [e.key for e in gone] == [old, newer]
    assert {e.key for e in store.entries()} == {held, leased, recent}  # over the cap: the rest is in use
    assert not (store.root / "used" / old).exists()


def test_a_command_keeps_what_it_made_and_stamps_what_it_was_served(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CKIT_CACHE_DIR", str(tmp_path / "store"))
    store = Store()
    served = _artifact(store, "served", 400, used_ago=9000)
    other = _artifact(store, "other", 400, used_ago=60)
    copy = tmp_path / "served.sqsh"
    os.link(store.path(served, "sqsh"), copy)
    cap_store(500, [copy])
    assert [e.key for e in store.entries()] == [served]  # the older one stayed: it was just used
    assert time.time() - (store.root / "used" / served).stat().st_mtime < 60
    assert other not in {e.key for e in personal.entries(store)}
