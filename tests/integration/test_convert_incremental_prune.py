"""Reuse files go with the outputs they point at: eviction, ``ckit cache prune`` and a damaged artifact the store
drops all leave no record of a gone output and no members file that no record names, and keep what a stored
output still needs. A reconversion that races a prune still gives the bytes of a cold conversion."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from buildkit.image.convert import convert
from buildkit.image.squashfs.codec import codec_version
from buildkit.image.squashfs.reuse import Records
from buildkit.storage.cache import CacheDir
from buildkit.storage.reuse_files import members_name
from buildkit.storage.store import Store
from tests.integration.hostile_images import sha
from tests.integration.registry_helpers import ckit
from tests.integration.test_convert_incremental import BASE, _archive, _top

CODEC = ("zstd:-3", codec_version("zstd", -3))
HOUR_AGO = time.time() - 3600


@pytest.fixture(autouse=True)
def _epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")


def _store_root(root: Path) -> Path:
    """A store's folder: a cache folder's is this user's tree in it."""
    tree = root / f"u{os.geteuid()}"
    return tree if tree.is_dir() else root


def _aged(root: Path) -> None:
    """Reuse files as a later prune sees them: older than the grace period spent on files a producer may be
    about to name."""
    for path in (_store_root(root) / "reuse").iterdir():
        os.utime(path, (HOUR_AGO, HOUR_AGO))


def _reuse(root: Path) -> list[str]:
    folder = _store_root(root) / "reuse"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _expected(layers: list[bytes]) -> list[str]:
    """The reuse files of the outputs that hold ``layers``: one record and one members file per layer."""
    records = Records(Path("/"))
    return sorted([records.path(sha(layer), *CODEC).name for layer in layers]
                  + [members_name(sha(layer)) for layer in layers])


def _prune(cache: Path, max_size: int) -> dict:  # type: ignore[type-arg]
    done = ckit("cache", "prune", "--cache", str(cache), "--max-size", str(max_size), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_prune_drops_the_reuse_files_of_evicted_outputs_and_keeps_the_shared_ones(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    store = CacheDir(cache).writer()
    before = convert(_archive(tmp_path / "a.tar", [*BASE, _top("a")]), "sqsh", store=store)
    now = convert(_archive(tmp_path / "b.tar", [*BASE, _top("b")]), "sqsh", store=store)
    meta = _store_root(cache) / "artifacts" / f"{before.key}.json"  # no use stamp: the older creation is evicted first
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "created": int(HOUR_AGO)}))
    _aged(cache)
    listed = json.loads(ckit("cache", "ls", "--cache", str(cache), "--json").stdout)["reuse"]
    # the base's records point at the newer output; the first top layer's at the older one
    assert listed["files"] == 8 and listed["orphaned_files"] == 0
    assert _reuse(cache) == _expected([*BASE, _top("a"), _top("b")])

    pruned = _prune(cache, now.size)
    assert [e["key"] for e in pruned["evicted"]] == [before.key]
    assert (pruned["reuse"]["removed_records"], pruned["reuse"]["removed_members"]) == (1, 1)
    assert pruned["reuse"]["freed_bytes"] > 0
    assert _reuse(cache) == _expected([*BASE, _top("b")])  # what the kept output needs survives, and works:
    again = convert(_archive(tmp_path / "c.tar", [*BASE, _top("link")]), "sqsh", store=store)
    assert again.reused_bytes > 0 and again.compressed_bytes < 10_000

    _aged(cache)
    pruned = _prune(cache, 0)
    assert len(pruned["evicted"]) == 2 and pruned["reuse"]["removed_members"] == 4
    assert _reuse(cache) == []


def test_the_dry_run_says_what_would_go(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    convert(_archive(tmp_path / "a.tar", [*BASE, _top("a")]), "sqsh", store=CacheDir(cache).writer())
    _aged(cache)
    done = ckit("cache", "prune", "--cache", str(cache), "--max-size", "0", "--dry-run", "--json")
    assert json.loads(done.stdout)["reuse"]["removed_members"] == 3
    assert len(_reuse(cache)) == 6
    done = ckit("cache", "prune", "--cache", str(cache), "--max-size", "0")
    assert "removed 6 reuse files no image needs" in done.stderr, done.stderr
    assert _reuse(cache) == []


def test_eviction_after_a_conversion_sweeps_too(tmp_path: Path) -> None:
    """What the Pyxis importer calls when the cache outgrows its max_size."""
    cache = CacheDir(tmp_path / "cache")
    convert(_archive(tmp_path / "a.tar", [*BASE, _top("a")]), "sqsh", store=cache.writer())
    _aged(cache.root)
    assert len(cache.evict(0)) == 1 and _reuse(cache.root) == []


def test_a_damaged_output_the_store_drops_takes_its_reuse_files(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    first = convert(_archive(tmp_path / "a.tar", [*BASE, _top("a")]), "sqsh", store=store)
    _aged(store.root)
    with first.path.open("r+b") as f:
        f.seek(5000)
        f.write(b"damage")
    assert store.get(first.key, "sqsh") is None and not first.path.exists()
    assert _reuse(store.root) == []


def _earlier_removed(cache: CacheDir, key: str) -> None:
    """Evicted and swept at once (as if long ago), once: the hook runs for each layer."""
    for entry in cache.entries():
        if entry.key == key:
            assert cache.remove(entry)
            cache.writer().sweep_reuse(grace=0)


@pytest.mark.parametrize("moment", ["before the earlier output is opened", "while the earlier output is copied"])
def test_a_prune_during_a_reconversion_gives_the_cold_bytes(moment: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cache = CacheDir(tmp_path / "cache")
    first = convert(_archive(tmp_path / "a.tar", [*BASE, _top("a")]), "sqsh", store=cache.writer())
    real_open = Records.open

    def opening(self: Records, record, decompress):  # type: ignore[no-untyped-def]
        if moment.startswith("before"):
            _earlier_removed(cache, first.key)
            return real_open(self, record, decompress)  # OSError: the layer is read after all
        earlier = real_open(self, record, decompress)
        _earlier_removed(cache, first.key)  # the open file is still read, and checked
        return earlier

    monkeypatch.setattr(Records, "open", opening)
    source = _archive(tmp_path / "b.tar", [*BASE, _top("b")])
    warm = convert(source, "sqsh", store=cache.writer())
    monkeypatch.undo()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert not first.path.exists()
    assert warm.path.read_bytes() == convert(source, "sqsh", store=Store(tmp_path / "cold")).path.read_bytes()
    assert (warm.reused_bytes > 0) == moment.startswith("while")
    # the new output's records were written, with their members files written again where the sweep took them
    assert _reuse(cache.root) == _expected([*BASE, _top("b")])
    records = Records(_store_root(cache.root))
    assert all(records.find(sha(layer), *CODEC) is not None for layer in (*BASE, _top("b")))


def test_reconversions_while_another_process_prunes_all_the_time(tmp_path: Path) -> None:
    """A pruner sweeps without a grace period and evicts every earlier output while reconversions run: each
    still gives the bytes of a cold conversion."""
    cache = CacheDir(tmp_path / "cache")
    tops = [_top("a"), _top("b"), _top("link"), _top("delete")]
    sources = [_archive(tmp_path / f"{n}.tar", [*BASE, top]) for n, top in enumerate(tops)]
    earlier: list[str] = []
    stop, failures, sweeps = threading.Event(), [], [0]

    def pruner() -> None:
        while not stop.is_set():
            try:
                for entry in cache.entries():
                    if entry.key in earlier:
                        cache.remove(entry)
                cache.writer().sweep_reuse(grace=0)
                sweeps[0] += 1
            except Exception as err:  # noqa: BLE001 - reported by the test
                failures.append(repr(err))
            time.sleep(0.005)

    thread = threading.Thread(target=pruner)
    thread.start()
    try:
        for source in sources:
            warm = convert(source, "sqsh", store=cache.writer())
            data = warm.path.read_bytes()
            if source != sources[-1]:
                earlier.append(warm.key)
            assert data == convert(source, "sqsh", store=Store(tmp_path / f"cold-{warm.key}")).path.read_bytes()
    finally:
        stop.set()
        thread.join()
    assert failures == [] and sweeps[0] > 10
    survivors = [*BASE, _top("delete")]  # the last output is kept: its reuse files may be all there or not
    assert set(_reuse(cache.root)) <= set(_expected(survivors))
