"""Reconverting an image whose lower layers ckit converted before: the base's compressed data is copied from the
earlier image, only what changed is read and compressed, and the result is byte-identical to a cold conversion.

Every kind of change: a new top layer, a changed top layer, a top layer that deletes and replaces base files
(whiteouts, an opaque dir, a file replaced by a directory), a hardlink into base files; ``.sif`` and ``.sqsh``;
both targets at once with one pass over the headers. A damaged record, an artifact changed in place behind an
unchanged mtime, and an artifact that is gone all end in a full conversion, without an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import zstandard

from buildkit.image import produce as produce_mod
from buildkit.image import reading
from buildkit.image.convert import ConvertResult, convert, convert_many
from buildkit.image.layers import flatten as flatten_mod
from buildkit.image.layers import layerfile
from buildkit.image.squashfs import reuse as squashfs_reuse
from buildkit.image.squashfs.blocks import BLOCK_SIZE
from buildkit.image.squashfs.codec import codec_version
from buildkit.image.squashfs.reuse import Records
from buildkit.storage import reuse_files
from buildkit.storage.store import Store
from tests.integration.hostile_images import docker_archive, entry, oci_layout, sha, tar_bytes

EPOCH = "1700000000"


def _text(seed: int, size: int) -> bytes:
    return (f"{seed} a line of some text {seed * 7 % 13}\n".encode() * (size // 20 + 1))[:size]


def _layer_base() -> bytes:
    noise = random.Random(1).randbytes
    files = [entry("usr", "dir"), entry("usr/lib", "dir"), entry("usr/share", "dir"), entry("usr/share/doc", "dir")]
    files += [entry(f"usr/lib/s{n:03d}", data=_text(n, 200 + 37 * n)) for n in range(120)]  # several fragment groups
    files += [entry("usr/lib/big0", data=noise(3 * BLOCK_SIZE + 5)), entry("usr/lib/big1", data=_text(9, 2 * BLOCK_SIZE)),
              entry("usr/lib/holes", data=bytes(BLOCK_SIZE) + _text(3, BLOCK_SIZE) + bytes(BLOCK_SIZE)),
              entry("usr/lib/exact", data=_text(4, BLOCK_SIZE)), entry("usr/lib/link", "symlink", target="s001")]
    files += [entry(f"usr/share/doc/d{n}", data=_text(100 + n, 900)) for n in range(20)]
    return tar_bytes(files)


def _layer_second() -> bytes:
    return tar_bytes([entry("usr/bin", "dir"), entry("usr/bin/tool", data=_text(50, 3 * BLOCK_SIZE)),
                      entry("usr/bin/small", data=b"#!/bin/sh\necho hi\n"),
                      entry("usr/lib/s005", data=b"replaced in the second layer\n")])


def _top(variant: str) -> bytes:
    if variant == "a":
        return tar_bytes([entry("opt", "dir"), entry("opt/app", data=_text(77, 2 * BLOCK_SIZE + 3)),
                          entry("opt/conf", data=b"a=1\n")])
    if variant == "b":  # the same names, other contents
        return tar_bytes([entry("opt", "dir"), entry("opt/app", data=_text(78, 2 * BLOCK_SIZE + 9)),
                          entry("opt/conf", data=b"a=2\n"), entry("opt/new", data=b"new\n")])
    if variant == "delete":
        return tar_bytes([entry("usr/lib/.wh.s010"), entry("usr/lib/.wh.big1"), entry("usr/lib/.wh.s060"),
                          entry("usr/share/doc/.wh..wh..opq"), entry("usr/share/doc/only", data=b"kept\n"),
                          entry("usr/lib/s020", data=b"replaced on top\n"), entry("usr/bin/.wh.tool"),
                          entry("usr/bin/tool", "dir"), entry("usr/bin/tool/inside", data=b"a dir now\n")])
    assert variant == "link"
    return tar_bytes([entry("opt", "dir"), entry("opt/link-small", "link", target="usr/lib/s030"),
                      entry("opt/link-big", "link", target="usr/lib/big0"), entry("opt/conf", data=b"a=3\n")])


BASE = [_layer_base(), _layer_second()]
CHANGES = {  # kind of change: (the image converted before, the image converted now)
    "new top layer": (BASE, [*BASE, _top("a")]),
    "changed top layer": ([*BASE, _top("a")], [*BASE, _top("b")]),
    "top layer deletes and replaces base files": ([*BASE, _top("a")], [*BASE, _top("delete")]),
    "hardlinks into base files": ([*BASE, _top("a")], [*BASE, _top("link")]),
}


@pytest.fixture(autouse=True)
def _epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)  # byte comparisons need the same superblock time


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The layers whose headers were read (pass 1), in order."""
    seen: list[str] = []
    real = flatten_mod.scan

    def counting(f, start, end, what):  # type: ignore[no-untyped-def]
        seen.append(what)
        return real(f, start, end, what)

    monkeypatch.setattr(flatten_mod, "scan", counting)
    yield seen


@pytest.fixture
def prepared(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The layers that were read and verified."""
    seen: list[str] = []
    real = reading.prepare

    def counting(blob, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(blob.what)
        return real(blob, *args, **kwargs)

    monkeypatch.setattr(reading, "prepare", counting)
    yield seen


def _archive(path: Path, layers: list[bytes]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    return docker_archive(path, layers)


def _data_bytes(layer: bytes) -> int:
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        return sum(m.size for m in tar if m.isreg())


@pytest.mark.parametrize("target", ["sqsh", "sif"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_reconversion_copies_the_base_and_equals_a_cold_conversion(change: str, target: str, tmp_path: Path,
                                                                   scans: list[str], prepared: list[str]) -> None:
    before, now = CHANGES[change]
    store = Store(tmp_path / "store")
    first = convert(_archive(tmp_path / "before.tar", before), target, store=store)
    assert first.reused_bytes == 0 and first.compressed_bytes > 0
    source = _archive(tmp_path / "now.tar", now)
    scans.clear()
    prepared.clear()
    warm = convert(source, target, store=store)
    # the base layers were neither read nor indexed again: only the top layer was
    assert scans == prepared == ["layer 3 (l2/layer.tar)"]
    cold = convert(source, target, store=Store(tmp_path / "cold"))
    assert warm.path.read_bytes() == cold.path.read_bytes()
    assert not warm.cache_hit and cold.reused_bytes == 0
    assert warm.reused_bytes > 0
    assert warm.compressed_bytes <= _data_bytes(now[-1]) + 64 * 1024  # the top layer and the rootfs additions


def test_a_deleting_top_layer_reads_back_right(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    convert(_archive(tmp_path / "before.tar", CHANGES["top layer deletes and replaces base files"][0]), "sqsh",
            store=store)
    warm = convert(_archive(tmp_path / "now.tar", CHANGES["top layer deletes and replaces base files"][1]), "sqsh",
                   store=store)
    out = tmp_path / "x"
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(out), str(warm.path)], check=True,  # noqa: S603, S607
                   stdout=subprocess.DEVNULL)
    lib = out / "usr/lib"
    assert not (lib / "s010").exists() and not (lib / "big1").exists() and not (lib / "s060").exists()
    assert (lib / "s020").read_bytes() == b"replaced on top\n"
    assert (lib / "s011").read_bytes() == _text(11, 200 + 37 * 11)  # a neighbour in the deleted file's group
    assert (lib / "s005").read_bytes() == b"replaced in the second layer\n"
    assert (lib / "big0").read_bytes() == random.Random(1).randbytes(3 * BLOCK_SIZE + 5)
    assert (lib / "holes").read_bytes() == bytes(BLOCK_SIZE) + _text(3, BLOCK_SIZE) + bytes(BLOCK_SIZE)
    assert sorted(p.name for p in (out / "usr/share/doc").iterdir()) == ["only"]
    assert (out / "usr/bin/tool/inside").read_bytes() == b"a dir now\n"


def test_data_missing_from_the_earlier_image_is_read_from_the_layer(tmp_path: Path, prepared: list[str]) -> None:
    """The earlier image had base files deleted on top; the new one keeps them: that base layer is read."""
    store = Store(tmp_path / "store")
    convert(_archive(tmp_path / "before.tar", [*BASE, _top("delete")]), "sqsh", store=store)
    source = _archive(tmp_path / "now.tar", [*BASE, _top("a")])
    prepared.clear()
    warm = convert(source, "sqsh", store=store)
    # the top layer, then lazily the base layers that hold files the earlier image had deleted (big1, tool)
    assert prepared == ["layer 3 (l2/layer.tar)", "layer 1 (l0/layer.tar)", "layer 2 (l1/layer.tar)"]
    assert warm.reused_bytes > 0
    assert warm.path.read_bytes() == convert(source, "sqsh", store=Store(tmp_path / "cold")).path.read_bytes()


def test_both_targets_at_once_read_each_layer_header_once(tmp_path: Path, scans: list[str]) -> None:
    source = oci_layout(tmp_path / "layout", [*BASE, _top("a")])
    results = convert_many(source, [("sif", None), ("sqsh", None)], store=Store(tmp_path / "store"))
    assert [r.target for r in results] == ["sif", "sqsh"] and not any(r.cache_hit for r in results)
    assert len(scans) == 3  # one pass over each of the three layers, for both targets
    scans.clear()
    changed = oci_layout(tmp_path / "changed", [*BASE, _top("b")])
    again = convert_many(changed, [("sif", None), ("sqsh", None)], store=Store(tmp_path / "store"))
    assert len(scans) == 1 and all(r.reused_bytes > 0 for r in again)
    cold = convert_many(changed, [("sif", None), ("sqsh", None)], store=Store(tmp_path / "cold"))
    assert [r.path.read_bytes() for r in again] == [r.path.read_bytes() for r in cold]


def _reconvert(tmp_path: Path, damage) -> tuple[ConvertResult, bytes]:  # type: ignore[no-untyped-def]
    store = Store(tmp_path / "store")
    first = convert(_archive(tmp_path / "before.tar", [*BASE, _top("a")]), "sqsh", store=store)
    damage(store, first.path)
    source = _archive(tmp_path / "now.tar", [*BASE, _top("b")])
    warm = convert(source, "sqsh", store=store)
    return warm, convert(source, "sqsh", store=Store(tmp_path / "cold")).path.read_bytes()


@pytest.mark.parametrize("kind", ["rec", "members"])
def test_a_damaged_record_is_dropped_and_the_conversion_is_full(kind: str, tmp_path: Path) -> None:
    def damage(store: Store, _artifact: Path) -> None:
        for record in (store.root / "reuse").glob(f"*.{kind}"):
            data = bytearray(record.read_bytes())
            data[-10] ^= 0xFF
            record.write_bytes(bytes(data))

    warm, cold = _reconvert(tmp_path, damage)
    assert warm.reused_bytes == 0 and warm.path.read_bytes() == cold
    records = Records(tmp_path / "store")
    for layer in (*BASE, _top("b")):  # made again, for the new artifact
        assert records.find(sha(layer), "zstd:-3", codec_version("zstd", -3)) is not None
    damaged = records.path(sha(_top("a")), "zstd:-3", codec_version("zstd", -3))
    assert damaged.exists() and records.find(sha(_top("a")), "zstd:-3", codec_version("zstd", -3)) is None
    assert not damaged.exists()  # dropped once looked up
    assert not records.members_path(sha(_top("a"))).exists() or kind == "rec"


def _rewritten(raw: bytes, kind: str) -> bytes:
    """A sound record rewritten as the earlier format wrote it (a JSON body), or with a hostile body of sound
    digest: counts that claim terabytes, a truncated frame."""
    refs, packed = reuse_files.record_refs(raw)
    line = refs.line() + b"\n"
    if kind == "format 3":
        record, _ = squashfs_reuse.decode(raw)
        seg = record.segment
        body = {"compression": record.compression, "codec": record.codec, "block_size": BLOCK_SIZE,
                "layout": squashfs_reuse.LAYOUT, "base": record.base, "start": seg.start, "end": seg.end,
                "files": [[o, at, list(words), crc] for o, (at, words, crc) in seg.files.items()],
                "groups": [[g, at, w, crc, list(alive)] for g, (at, w, crc, alive) in seg.groups.items()]}
        rest = line + zstandard.ZstdCompressor(level=3).compress(json.dumps(body).encode())
        return b"ckit-reuse 3\n" + hashlib.sha256(rest).hexdigest().encode() + b"\n" + rest
    if kind == "huge counts":
        head, _ = zstandard.ZstdDecompressor().decompress(packed).split(b"\n", 1)
        packed = zstandard.ZstdCompressor().compress(
            json.dumps({**json.loads(head), "files": 1 << 40, "words": 1 << 50}).encode() + b"\n" + bytes(64))
    else:
        packed = packed[:len(packed) // 2]
    return reuse_files.frame_record(refs, packed)


@pytest.mark.parametrize("kind", ["format 3", "huge counts", "truncated"])
def test_records_of_the_earlier_format_or_hostile_ones_mean_a_full_conversion(kind: str, tmp_path: Path,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    def rewrite(store: Store, _artifact: Path) -> None:
        for path in (store.root / "reuse").glob("*.rec"):
            path.write_bytes(_rewritten(path.read_bytes(), kind))

    caplog.set_level("INFO", logger="ckit.reuse")
    warm, cold = _reconvert(tmp_path, rewrite)
    assert warm.reused_bytes == 0 and warm.path.read_bytes() == cold
    assert "dropped" in caplog.text and "Traceback" not in caplog.text
    records = Records(tmp_path / "store")
    for layer in (*BASE, _top("b")):  # made again, in this format, for the new artifact
        found = records.find(sha(layer), "zstd:-3", codec_version("zstd", -3))
        assert found is not None and records.path(sha(layer), "zstd:-3", codec_version("zstd", -3)).read_bytes() \
            .startswith(reuse_files.RECORD_MAGIC)


def test_an_artifact_changed_behind_an_unchanged_mtime_is_caught_by_its_checksums(tmp_path: Path) -> None:
    def damage(_store: Store, artifact: Path) -> None:
        st = artifact.stat()
        with artifact.open("r+b") as f:
            f.seek(4096 + 300)  # inside the first layer's data (layers start on 4 KiB boundaries)
            byte = f.read(1)
            f.seek(4096 + 300)
            f.write(bytes([byte[0] ^ 0xFF]))
        os.utime(artifact, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert [artifact.stat().st_ino, artifact.stat().st_size, artifact.stat().st_mtime_ns] == \
            [st.st_ino, st.st_size, st.st_mtime_ns]

    warm, cold = _reconvert(tmp_path, damage)
    assert warm.reused_bytes == 0 and warm.path.read_bytes() == cold


def test_an_artifact_that_is_gone_drops_its_records(tmp_path: Path) -> None:
    def damage(_store: Store, artifact: Path) -> None:
        artifact.unlink()

    warm, cold = _reconvert(tmp_path, damage)
    assert warm.reused_bytes == 0 and warm.path.read_bytes() == cold


def test_a_record_is_used_only_for_the_same_compression(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    convert(_archive(tmp_path / "before.tar", [*BASE, _top("a")]), "sqsh", store=store, compress="zstd:3")
    warm = convert(_archive(tmp_path / "now.tar", [*BASE, _top("b")]), "sqsh", store=store, compress="zstd:4")
    assert warm.reused_bytes == 0


def test_layers_from_a_compressed_layout_are_reused_without_decompressing(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "store")
    convert(oci_layout(tmp_path / "a", [*BASE, _top("a")]), "sqsh", store=store)
    gunzips: list[str] = []
    real = layerfile._gunzip
    monkeypatch.setattr(layerfile, "_gunzip", lambda reader, out, what: (gunzips.append(what), real(reader, out, what)))
    warm = convert(oci_layout(tmp_path / "b", [*BASE, _top("b")]), "sqsh", store=store)
    assert len(gunzips) == 1 and warm.reused_bytes > 0  # only the new top layer was decompressed


def test_without_source_date_epoch_a_sqsh_is_still_reproducible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, the superblock time is 0: a warm and a cold conversion (two caches, two times) give the same bytes,
    which the Pyxis importer's kill -9 test relies on when it compares what two caches serve."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    store = Store(tmp_path / "store")
    convert(_archive(tmp_path / "before.tar", BASE), "sqsh", store=store)
    source = _archive(tmp_path / "now.tar", [*BASE, _top("a")])
    warm = convert(source, "sqsh", store=store)
    monkeypatch.setattr(produce_mod.time, "time", lambda: 2_000_000_000.0)  # a later run, another second
    cold = convert(source, "sqsh", store=Store(tmp_path / "cold"))
    assert warm.reused_bytes > 0 and cold.reused_bytes == 0
    assert warm.path.read_bytes() == cold.path.read_bytes()
