"""Every local SOURCE form reads the same image to the same bytes (docker-archive, oci, oci-archive, an index
resolved to this host's platform); a conversion that shares layers with an earlier one copies their data and still
writes the bytes a cold conversion writes; the sources' refusals name what to give instead."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from buildkit.errors import ConfigError, IntegrityError
from buildkit.image.convert import convert
from buildkit.image.sources.base import host_arch
from buildkit.storage.store import Store
from tests.unit.fake_image import config, digest, docker_archive, oci_layout, sample_layers, tar_of


@pytest.fixture(autouse=True)
def _dated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    monkeypatch.delenv("CKIT_PLAIN", raising=False)


def made(source: str, tmp_path: Path, store: str, target: str = "sqsh") -> bytes:
    return convert(source, target, store=Store(tmp_path / store)).path.read_bytes()


def test_every_local_form_gives_the_same_bytes(tmp_path: Path) -> None:
    layers = sample_layers()
    layout = oci_layout(tmp_path / "layout", layers)
    plain_layout = oci_layout(tmp_path / "plain", layers, compress=False)
    archive = docker_archive(tmp_path / "save.tar", {"localhost/app:1": layers})
    oci_tar = tar_of({str(p.relative_to(layout)): p.read_bytes() for p in sorted(layout.rglob("*")) if p.is_file()},
                     tmp_path / "layout.tar")
    expected = made(f"oci:{layout}:1", tmp_path, "oci")
    assert made(f"oci:{plain_layout}", tmp_path, "plain") == expected  # one manifest: no tag needed
    assert made(f"docker-archive:{archive}", tmp_path, "archive") == expected
    assert made(f"docker-archive:{archive}:localhost/app:1", tmp_path, "archive-tag") == expected
    assert made(f"oci-archive:{oci_tar}:1", tmp_path, "oci-archive") == expected


def test_an_index_is_resolved_to_this_hosts_platform(tmp_path: Path) -> None:
    layers = sample_layers()
    layout = oci_layout(tmp_path / "layout", layers)
    index = json.loads((layout / "index.json").read_text())
    image = dict(index["manifests"][0], platform={"os": "linux", "architecture": host_arch()})
    other = dict(image, platform={"os": "linux", "architecture": "s390x-none"})
    nested = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                         "manifests": [other, image]}).encode()
    (layout / "blobs" / "sha256" / digest(nested)[7:]).write_bytes(nested)
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.index.v1+json", "digest": digest(nested), "size": len(nested),
        "annotations": {"org.opencontainers.image.ref.name": "multi"}}]}))
    expected = made(f"oci:{oci_layout(tmp_path / 'single', layers)}:1", tmp_path, "single")
    assert made(f"oci:{layout}:multi", tmp_path, "multi") == expected


def test_a_conversion_sharing_layers_copies_them_and_writes_the_cold_bytes(tmp_path: Path) -> None:
    layers = sample_layers()
    first = oci_layout(tmp_path / "first", layers[:2])
    grown = oci_layout(tmp_path / "grown", layers)
    store = Store(tmp_path / "store")
    convert(f"oci:{first}:1", "sqsh", store=store)
    warm = convert(f"oci:{grown}:1", "sqsh", store=store)
    assert warm.reused_bytes > 1_000_000  # the two shared layers' large files were copied, not compressed
    cold = convert(f"oci:{grown}:1", "sqsh", store=Store(tmp_path / "cold"))
    assert cold.reused_bytes == 0
    assert warm.path.read_bytes() == cold.path.read_bytes()
    again = convert(f"oci:{grown}:1", "sif", store=store)  # another target: its own records, none yet
    assert again.reused_bytes == 0 and not again.cache_hit


def test_the_sources_refuse_what_they_cannot_pick(tmp_path: Path) -> None:
    layers = sample_layers()
    archive = docker_archive(tmp_path / "two.tar", {"localhost/a:1": layers[:1], "localhost/b:1": layers})
    with pytest.raises(ConfigError, match="the archive holds 2 images") as err:
        made(f"docker-archive:{archive}", tmp_path, "two")
    assert "localhost/a:1" in (err.value.hint or "")
    with pytest.raises(ConfigError, match="no image tagged 'localhost/c:1'"):
        made(f"docker-archive:{archive}:localhost/c:1", tmp_path, "c")
    layout = oci_layout(tmp_path / "layout", layers)
    with pytest.raises(ConfigError, match="no manifest tagged 'nope'"):
        made(f"oci:{layout}:nope", tmp_path, "nope")
    with pytest.raises(ConfigError, match="is not a file"):
        made(f"docker-archive:{tmp_path}", tmp_path, "folder")


def test_an_archive_whose_config_lists_other_layers_is_refused(tmp_path: Path) -> None:
    layers = sample_layers()
    archive = tmp_path / "bad.tar"
    cfg = config(layers[:1])  # one diff_id for three layers
    names = [f"l{n}/layer.tar" for n in range(3)]
    tar_of({"c.json": cfg, **dict(zip(names, layers, strict=True)), "manifest.json": json.dumps(
        [{"Config": "c.json", "RepoTags": ["x:1"], "Layers": names}]).encode()}, archive)
    with pytest.raises(IntegrityError, match="lists 1 rootfs.diff_ids for 3 layers"):
        made(f"docker-archive:{archive}", tmp_path, "bad")


def test_a_sif_is_written_once_its_squashfs_where_it_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The partition is written at its place in the SIF: no scratch squashfs copied into the SIF afterwards (a
    second write of the whole image on every conversion), cold or from an earlier SIF's layers."""
    import buildkit.image.sif.write as sif_write
    from buildkit.image.sif.read import read_sif
    from buildkit.image.squashfs import blocks

    layers = sample_layers()
    written: list[int] = []
    pwrite, real_copy_into = os.pwrite, sif_write.copy_into

    def counted_pwrite(fd: int, data: bytes, offset: int) -> int:
        written.append(n := pwrite(fd, data, offset))
        return n

    def copied(*args: object) -> int:
        raise AssertionError("the squashfs was copied into the SIF")

    monkeypatch.setattr(sif_write, "copy_into", copied)
    monkeypatch.setattr(blocks.os, "pwrite", counted_pwrite)  # the squashfs writer's only writes (os is shared)
    store = Store(tmp_path / "store")
    convert(f"oci:{oci_layout(tmp_path / 'first', layers[:2])}:1", "sif", store=store)
    written.clear()
    grown = f"oci:{oci_layout(tmp_path / 'grown', layers)}:1"
    warm = convert(grown, "sif", store=store)
    monkeypatch.setattr(blocks.os, "pwrite", pwrite)
    size = warm.path.stat().st_size
    # the shared layers' data is copied from the earlier SIF in the kernel; what is written is the rest, once
    assert warm.reused_bytes > 1_000_000 and sum(written) < size / 2
    assert not list((tmp_path / "store").rglob("*.squashfs"))
    cold = convert(grown, "sif", store=Store(tmp_path / "cold"))
    assert warm.path.read_bytes() == cold.path.read_bytes()
    # the same bytes as the SIF writer makes of that squashfs as a file of its own
    partition = read_sif(cold.path).primary_partition()
    assert partition is not None
    squash = tmp_path / "part.squashfs"
    squash.write_bytes(cold.path.read_bytes()[partition.offset:partition.offset + partition.size])
    sif = read_sif(cold.path)
    deffile, oci_config = (cold.path.read_bytes()[d.offset:d.offset + d.size] for d in sif.descriptors[:2])
    again = tmp_path / "again.sif"
    monkeypatch.setattr(sif_write, "copy_into", real_copy_into)
    sif_write.write_apptainer_sif(again, deffile=deffile, oci_config=oci_config, squashfs=squash, arch=host_arch(),
                                  source_date_epoch=1700000000)
    assert again.read_bytes() == cold.path.read_bytes()
