"""The cache folder layout: holds, least-recently-used eviction that never removes a held image, the index that
``ckit launch`` reads to find what ``ckit stage`` put there."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from buildkit.errors import ConfigError
from buildkit.launch.plan import LaunchRequest, plan_launch
from buildkit.site import load_site
from buildkit.storage.cache import CacheDir, image_ref_name
from buildkit.storage.lease import NAMESPACE, Owner
from buildkit.storage.lookup import find_staged, lookup
from buildkit.storage.store import make_key

DIGEST = "sha256:" + "cd" * 32


def put(cache: CacheDir, name: str, size: int = 4096, target: str = "sqsh", used: float | None = None) -> str:
    """Publish a fake artifact of ``size`` bytes (as a conversion would; a whole block, the space it is counted
    by) and return its key."""
    key = make_key(source_digest=f"sha256:{name}", target=target)
    temp = cache.writer().temp_path(key, target)
    temp.write_bytes(b"x" * size)
    cache.writer().publish(key, target, temp, {"target": target, "source": name, "created": int(time.time())},
                        lambda p: None)
    cache.touch(key)
    if used is not None:
        os.utime(cache.writer().root / "used" / key, (used, used))
    return key


def test_holds_and_idempotent_release(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path)
    key = put(cache, "a")
    cache.hold(key, "7.0@node1")
    cache.hold(key, "8.0@node2")
    assert cache.holders(key) == ("7.0@node1", "8.0@node2")
    assert cache.release("7.0@node1") == 1
    assert cache.release("7.0@node1") == 0  # pyxis calls release twice
    assert cache.holders(key) == ("8.0@node2",)


def test_eviction_is_least_recently_used_and_skips_held_images(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path)
    now = time.time()
    old, held, recent = (put(cache, n, used=now - age) for n, age in (("old", 300), ("held", 200), ("recent", 10)))
    cache.hold(held, "1.0@n")
    assert [e.key for e in cache.evict(8192)] == [old]  # 3 blocks > 2: the least recently used goes
    assert [e.key for e in cache.evict(6000)] == [recent]  # the held one is older, but held
    assert [e.key for e in cache.evict(0)] == [] and cache.total_size() == 4096
    cache.release("1.0@n")
    assert [e.key for e in cache.evict(0)] == [held]
    assert cache.entries() == []


def test_eviction_dry_run_removes_nothing(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path)
    put(cache, "a")
    assert len(cache.evict(0, dry_run=True)) == 1 and cache.total_size() == 4096


def test_a_hold_taken_while_evicting_keeps_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader takes its hold after the evictor's first check: the evictor sees it on its second and puts the
    file back, so the path the reader is about to print still exists."""
    cache = CacheDir(tmp_path)
    key = put(cache, "a")
    entry = cache.entries()[0]
    calls = iter([(), ("9.0@n",)])
    monkeypatch.setattr(cache, "holders", lambda k: next(calls))
    assert cache.remove(entry) is False
    assert entry.path.is_file() and cache.writer().get(key, "sqsh") is not None
    assert [p.name for p in cache.writer().artifacts.iterdir() if p.name.startswith(".")] == []


def test_cleanup_removes_what_dead_work_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = CacheDir(tmp_path, hold_max_age=100)
    key = put(cache, "a")
    cache.hold(key, "old@n")
    os.utime(cache.writer().root / "holds" / key / "old@n", (time.time() - 1000,) * 2)
    dead_key = "f" * 64
    lease = cache.writer().locks / f"{dead_key}.lease"
    owner = Owner("d" * 32, os.uname().nodename, 2**22 + 3, "1", "5.0@n", 0, NAMESPACE)
    own = lease.with_name(f"{lease.name}.{owner.token}")
    own.write_bytes(owner.encode())
    os.link(own, lease)
    temp = cache.writer().temp_path(dead_key, "sqsh")
    (cache.writer().work / dead_key).mkdir(parents=True)
    for path in (temp, cache.writer().work / dead_key):
        os.utime(path, (time.time() - 1000,) * 2)
    removed = cache.cleanup(cache.writer(), older_than=60)
    assert not lease.exists() and not own.exists() and not temp.exists() and not (cache.writer().work / dead_key).exists()
    assert not (cache.writer().root / "holds" / key / "old@n").exists() and len(removed) >= 4
    assert cache.writer().get(key, "sqsh") is not None  # published artifacts are not leftovers


def stage_record(cache: CacheDir, kind: str, name: str, key: str, compression: str = "gzip:1",
                 **fields: str) -> None:
    """A record as ``ckit stage`` writes it: it names what it was written for (a stack, a digest)."""
    if kind == "stacks":
        fields.setdefault("stack", name.split(".")[0])
    if kind == "images":
        fields.setdefault("digest", DIGEST)
    cache.write_ref(kind, name, {"key": key, "compression": compression, **fields})


def test_lookup_by_stack_tag_and_digest(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path)
    key = put(cache, "img", target="sif")
    stage_record(cache, "images", image_ref_name("nvcr.io", "nvidia/pytorch", DIGEST, "sif", "gzip:1"), key)
    cache.write_ref("tags", "nvcr.io+nvidia+pytorch:24.06-py3", {"digest": DIGEST})
    stage_record(cache, "stacks", "pytorch-ddp.sif.gzip:1", key)
    path = cache.writer().path(key, "sif")
    assert lookup(tmp_path, "nvcr.io/nvidia/pytorch:24.06-py3", "sif")[0] == path  # type: ignore[index]
    assert lookup(tmp_path, "docker://nvcr.io#nvidia/pytorch:24.06-py3", "sif")[0] == path  # type: ignore[index]
    assert lookup(tmp_path, f"nvcr.io/nvidia/pytorch@{DIGEST}", "sif")[0] == path  # type: ignore[index]
    assert lookup(tmp_path, "pytorch-ddp", "sif", stack=True)[0] == path  # type: ignore[index]
    assert lookup(tmp_path, "nvcr.io/nvidia/pytorch:24.06-py3", "sqsh") is None  # wrong format for the runtime
    assert lookup(tmp_path, "nvcr.io/nvidia/pytorch:24.06-py3", "sif", ("zstd",)) is None  # site cannot mount it
    assert lookup(tmp_path, "nvcr.io/nvidia/pytorch:23.01-py3", "sif") is None


def _tara(tmp_path: Path):  # type: ignore[no-untyped-def]
    return dataclasses.replace(load_site("tara"), shared_image_dir=str(tmp_path / "shared"))


def test_launch_runs_what_was_staged_for_a_stack_or_a_reference(tmp_path: Path) -> None:
    """Issue 9 item 1: launch found `<shared>/STACK.sif` by a guessed name (stage writes other names), silently."""
    site = _tara(tmp_path)
    cache = CacheDir(tmp_path / "shared")
    key = put(cache, "img", target="sif")
    stage_record(cache, "stacks", "pytorch-ddp.sif.gzip:1", key)
    stage_record(cache, "images", image_ref_name("nvcr.io", "nvidia/pytorch", DIGEST, "sif", "gzip:1"), key)
    cache.write_ref("tags", "nvcr.io+nvidia+pytorch:24.06-py3", {"digest": DIGEST})
    for image in ("pytorch-ddp", "nvcr.io/nvidia/pytorch:24.06-py3", f"nvcr.io/nvidia/pytorch@{DIGEST}"):
        plan = plan_launch(site, LaunchRequest(command=("python", "t.py"), image=image, account="p1"))
        assert plan.image is not None and plan.image.kind == "path"
        assert plan.image.value == str(cache.writer().path(key, "sif"))
        assert not any("stage" in w for w in plan.warnings)


def test_launch_says_clearly_when_a_stack_was_not_staged(tmp_path: Path) -> None:
    site = _tara(tmp_path)
    with pytest.raises(ConfigError) as err:
        plan_launch(site, LaunchRequest(command=("true",), image="pytorch-ddp", account="p1"))
    assert err.value.message == (f"--image pytorch-ddp: nothing is staged for stack pytorch-ddp (.sif for singularity) "
                                 f"in {tmp_path / 'shared'}")
    assert "ckit stage pytorch-ddp --site tara" in str(err.value.hint)


def test_an_unstaged_reference_still_runs_from_the_registry(tmp_path: Path) -> None:
    site = dataclasses.replace(load_site("oci"), shared_image_dir=str(tmp_path / "none-here"))
    plan = plan_launch(site, LaunchRequest(command=("true",), image="nvcr.io/nvidia/pytorch:24.06-py3"))
    assert plan.image is not None and plan.image.kind == "ref"
    assert find_staged("x/y:1", runtime="podman", target=None, shared_dir=str(tmp_path), compressions=(), site="local",
                       stack=False) is None


def test_a_record_names_a_key_never_a_path(tmp_path: Path) -> None:
    cache = CacheDir(tmp_path / "cache")
    outside = tmp_path / "elsewhere.sif"
    outside.write_bytes(b"x")
    stage_record(cache, "stacks", "evil.sif.gzip:1", "../../elsewhere")
    assert lookup(cache.root, "evil", "sif", stack=True) is None
    assert cache.writer().get("../../elsewhere", "sif") is None
    with pytest.raises(ValueError):
        cache.hold("../../x", "1.0@n")


def test_a_use_while_evicting_keeps_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader on another NFS client whose hold the evictor's folder listing does not show yet: its use stamp
    (read by opening the marker, which fetches fresh attributes) moved, so the file is put back."""
    cache = CacheDir(tmp_path)
    key = put(cache, "a", used=time.time() - 100)
    entry = cache.entries()[0]
    real = cache.holders

    def holders_then_use(k: str) -> tuple[str, ...]:
        cache.touch(k)  # the reader stamps its use between the evictor's checks
        return real(k)

    monkeypatch.setattr(cache, "holders", holders_then_use)
    assert cache.remove(entry) is False
    assert cache.writer().get(key, "sqsh") is not None
