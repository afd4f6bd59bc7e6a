"""podman's storage read in place (buildkit.image.sources.engine_storage), against a store laid out here as
containers-storage's overlay driver lays it out: images.json, the config under its base64 name, layers.json, each
layer's files and its tar-split record. The layer comes back byte for byte; anything else falls back (None or
Unreadable), and nothing is read outside a layer's folder."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from buildkit.image.convert import convert
from buildkit.image.sources import engine_storage as E
from buildkit.image.sources.docker_daemon import DaemonSource
from buildkit.storage.store import Store
from tests.unit.fake_image import config, digest, oci_layout, sample_layers


def tar_split(layer: bytes, files: Path) -> bytes:
    """The layer's tar-split record (headers and padding verbatim, file data by name), its files under ``files``."""
    lines = []
    end = 0
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        for member in tar:
            lines.append({"type": 2, "payload": base64.b64encode(layer[member.offset:member.offset_data]).decode()})
            target = files / member.name
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(layer[member.offset_data:member.offset_data + member.size])
                lines.append({"type": 1, "name": member.name, "size": member.size})
            end = member.offset_data + (member.size + 511) // 512 * 512 if member.isfile() else member.offset_data
            if member.isfile() and member.size % 512:
                pad = layer[member.offset_data + member.size:end]
                lines.append({"type": 2, "payload": base64.b64encode(pad).decode()})
    lines.append({"type": 2, "payload": base64.b64encode(layer[end:]).decode()})
    return gzip.compress(b"\n".join(json.dumps(line).encode() for line in lines) + b"\n")


def podman_store(root: Path, layers: list[bytes]) -> str:
    """The image in an overlay store at ``root``; its ID."""
    cfg = config(layers)
    image_id = digest(cfg)
    records, parent = [], None
    for n, layer in enumerate(layers):
        layer_id = f"{n:02d}" + hashlib.sha256(layer).hexdigest()[:62]
        files = root / "overlay" / layer_id / "diff"
        files.mkdir(parents=True)
        (root / "overlay-layers").mkdir(exist_ok=True)
        (root / "overlay-layers" / f"{layer_id}.tar-split.gz").write_bytes(tar_split(layer, files))
        records.append({"id": layer_id, "parent": parent, "diff-digest": digest(layer), "diff-size": len(layer)})
        parent = layer_id
    (root / "overlay-layers" / "layers.json").write_text(json.dumps(records))
    images = root / "overlay-images"
    (images / image_id[7:]).mkdir(parents=True)
    (images / image_id[7:] / ("=" + base64.b64encode(image_id.encode()).decode())).write_bytes(cfg)
    (images / "images.json").write_text(json.dumps([{"id": image_id[7:], "layer": parent}]))
    return image_id


def test_the_layers_come_back_byte_for_byte(tmp_path: Path) -> None:
    layers = sample_layers()
    image_id = podman_store(tmp_path, layers)
    stored = E.find(tmp_path, "overlay", image_id)
    assert stored.config == config(layers)
    assert [layer.diff_id for layer in stored.layers] == [digest(t) for t in layers]
    for layer, expected in zip(stored.layers, layers, strict=True):
        chunks = list(E.assemble(layer))
        assert b"".join(chunks) == expected
        assert all(len(c) <= E.CHUNK for c in chunks[:-1])


def test_only_a_local_podman_with_the_overlay_driver_is_read(tmp_path: Path) -> None:
    image_id = podman_store(tmp_path, sample_layers())
    attrs = {"GraphDriver": {"Name": "overlay", "Data": {"UpperDir": str(tmp_path / "overlay" / "x" / "diff")}}}
    assert E.locate("podman 5.0", "unix:///run/podman.sock", attrs, image_id) is not None
    assert E.locate("docker 27", "unix:///run/docker.sock", attrs, image_id) is None
    assert E.locate("podman 5.0", "tcp://host:2375", attrs, image_id) is None
    assert E.locate("podman 5.0", "unix:///s", {"GraphDriver": {"Name": "vfs"}}, image_id) is None
    assert E.locate("podman 5.0", "unix:///s", attrs, "sha256:" + "0" * 64) is None  # not there: the save


def test_a_store_that_does_not_match_the_image_is_not_read(tmp_path: Path) -> None:
    layers = sample_layers()
    image_id = podman_store(tmp_path, layers)
    records = json.loads((tmp_path / "overlay-layers" / "layers.json").read_text())
    records[0]["diff-digest"] = digest(b"another layer")
    (tmp_path / "overlay-layers" / "layers.json").write_text(json.dumps(records))
    with pytest.raises(E.Unreadable, match="does not match the config's diff_ids"):
        E.find(tmp_path, "overlay", image_id)
    config_file = next((tmp_path / "overlay-images" / image_id[7:]).iterdir())
    config_file.write_bytes(config_file.read_bytes() + b" ")
    with pytest.raises(E.Unreadable, match="does not match the image ID"):
        E.find(tmp_path, "overlay", image_id)


def test_a_layer_is_never_read_through_a_link_or_outside_its_folder(tmp_path: Path) -> None:
    layers = sample_layers()
    image_id = podman_store(tmp_path / "store", layers)
    first = E.find(tmp_path / "store", "overlay", image_id).layers[0]
    secret = tmp_path / "secret"
    secret.write_bytes(b"x" * 700_000)
    big = first.files / "usr" / "lib" / "big.so"
    big.unlink()
    os.symlink(secret, big)  # the same size, elsewhere
    with pytest.raises(E.Unreadable):
        b"".join(E.assemble(first))
    (first.files / "usr" / "lib").rename(first.files / "usr" / "lib2")
    os.symlink(first.files / "usr" / "lib2", first.files / "usr" / "lib")  # a linked folder
    with pytest.raises(E.Unreadable):
        b"".join(E.assemble(first))
    hostile = tmp_path / "hostile.tar-split.gz"
    hostile.write_bytes(gzip.compress(json.dumps({"type": 1, "name": "../secret", "size": 1}).encode() + b"\n"))
    with pytest.raises(E.Unreadable, match="not a path inside the layer"):
        b"".join(E.assemble(E.StoredLayer(first.diff_id, 1, first.files, hostile)))


class LocalPodman:
    """The engine's side of a ``docker-daemon:`` conversion that reads the storage: who it is and where."""

    server, address = "podman 5.0", "unix:///run/podman/podman.sock"

    def sdk_client(self, timeout: int) -> object:
        raise AssertionError("the storage was readable: no save")


def test_an_engine_image_converts_from_the_storage_without_a_save(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    layers = sample_layers()
    image_id = podman_store(tmp_path / "store", layers)
    upper = tmp_path / "store" / "overlay" / "top" / "diff"
    inspected = {"Id": image_id, "GraphDriver": {"Name": "overlay", "Data": {"UpperDir": str(upper)}}}
    source = DaemonSource("docker-daemon:localhost/app:1", "localhost/app:1", daemon=LocalPodman(),  # type: ignore[arg-type]
                          inspected=inspected)
    made = convert(source, "sqsh", store=Store(tmp_path / "s"))
    local = convert(f"oci:{oci_layout(tmp_path / 'layout', layers)}:1", "sqsh", store=Store(tmp_path / "o"))
    assert made.source_digest == image_id
    assert abs(made.size - local.size) < 4096  # the same tree; only the provenance line differs
