"""Push internals without a registry: deterministic gzip, manifests in both formats, artifact kinds."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import zlib
from pathlib import Path

import pytest

from buildkit.errors import CompatError, ConfigError, IntegrityError
from buildkit.registry.transfer import known_digests
from buildkit.registry.transfer.artifacts import SIF, SIF_LAYER_PROTO, SQSH, kind_of_manifest
from buildkit.registry.transfer.compress import HEADER, METHOD, gzip_stream
from buildkit.registry.transfer.images import (
    DOCKER_LAYER_GZIP,
    ImageInput,
    check_format,
    compression_of,
    image_manifest,
)
from buildkit.registry.transfer.layers import Blob, LayerSource
from buildkit.site.compat import SIF_LAYER_V1


def _gz(data: bytes, threads: int) -> tuple[bytes, object]:
    out = io.BytesIO()
    made = gzip_stream(io.BytesIO(data), len(data), out, what="layer", threads=threads)
    return out.getvalue(), made


@pytest.mark.parametrize("size", [0, 1, 32 << 10, (4 << 20) - 1, (4 << 20) + 1, 9 << 20])
def test_gzip_is_the_same_bytes_whatever_the_threads(size: int) -> None:
    data = (os.urandom(size // 2) + b"\0" * (size - size // 2)) if size else b""
    one, made = _gz(data, 1)
    three, _ = _gz(data, 3)
    assert one == three and one[:10] == HEADER  # no name, no mtime: nothing varies between runs
    assert gzip.decompress(one) == data and zlib.decompress(one, 31) == data
    assert made.diff_id == "sha256:" + hashlib.sha256(data).hexdigest()  # type: ignore[attr-defined]
    assert made.digest == "sha256:" + hashlib.sha256(one).hexdigest()  # type: ignore[attr-defined]
    assert made.size == len(one)  # type: ignore[attr-defined]


def test_gzip_of_a_source_that_ends_early_is_an_integrity_error() -> None:
    with pytest.raises(IntegrityError, match="ended after 10 of its 20 bytes"):
        gzip_stream(io.BytesIO(b"x" * 10), 20, io.BytesIO(), what="layer 1")


def test_compressed_digests_are_remembered_by_diff_id_and_method(tmp_path: Path) -> None:
    diff_id = "sha256:" + "1" * 64
    assert known_digests.lookup_compressed(diff_id, METHOD, tmp_path) is None
    known_digests.remember_compressed(diff_id, METHOD, "sha256:" + "2" * 64, 42, tmp_path)
    assert known_digests.lookup_compressed(diff_id, METHOD, tmp_path) == ("sha256:" + "2" * 64, 42)
    assert known_digests.lookup_compressed(diff_id, "gzip-other-v9", tmp_path) is None


def _image(native: str, layer_type: str | None = None, compression: str = "tar", **extra: object) -> ImageInput:
    config = json.dumps({"created": "2024-01-02T03:04:05Z", "config": {"Labels": {"io.ckit.stack": "s"}}}).encode()
    layer = LayerSource(Path("x"), 0, 10, "layer 1", compression, diff_id="sha256:" + "a" * 64,
                        media_type=layer_type)
    return ImageInput("img", config, [layer], native, **extra)  # type: ignore[arg-type]


def test_docker_manifests_have_docker_types_and_no_annotations() -> None:
    image = _image("docker")
    blob = Blob("sha256:" + "b" * 64, 5, "gzip", changed=True)
    body = json.loads(image_manifest(image, "docker", [blob], None))
    assert body["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert body["config"]["mediaType"] == "application/vnd.docker.container.image.v1+json"
    assert body["layers"] == [{"mediaType": DOCKER_LAYER_GZIP, "size": 5, "digest": "sha256:" + "b" * 64}]
    assert "annotations" not in body
    oci = json.loads(image_manifest(image, "oci", [blob], {"k": "v"}))
    assert oci["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert oci["layers"][0]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    assert oci["annotations"] == {"k": "v"}
    assert image.labels == {"io.ckit.stack": "s"} and image.created == "2024-01-02T03:04:05Z"


def test_a_zstd_layer_cannot_go_into_a_docker_manifest() -> None:
    image = _image("oci", "application/vnd.oci.image.layer.v1.tar+zstd", "zstd")
    blob = Blob("sha256:" + "c" * 64, 10, "zstd", changed=False)
    with pytest.raises(CompatError, match="a zstd layer has no place in a docker manifest") as err:
        image_manifest(image, "docker", [blob], None)
    assert err.value.exit_code == 3
    assert json.loads(image_manifest(image, "oci", [blob], None))["layers"][0]["mediaType"].endswith("+zstd")


def test_an_unchanged_manifest_is_pushed_byte_for_byte() -> None:
    original = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "x": 1}'
    image = _image("oci", "application/vnd.oci.image.layer.v1.tar+gzip", "gzip",
                   manifest=json.loads(original), original=original)
    blob = Blob("sha256:" + "d" * 64, 10, "gzip", changed=False)
    assert image_manifest(image, "oci", [blob], None) is original
    annotated = json.loads(image_manifest(image, "oci", [blob], {"a": "1"}))
    assert annotated["x"] == 1 and annotated["annotations"] == {"a": "1"}  # other fields are kept


def test_layer_media_types_say_how_the_bytes_are_packed() -> None:
    assert compression_of("application/vnd.oci.image.layer.v1.tar+gzip") == "gzip"
    assert compression_of(DOCKER_LAYER_GZIP) == "gzip"
    assert compression_of("application/vnd.oci.image.layer.v1.tar+zstd") == "zstd"
    assert compression_of("application/vnd.oci.image.layer.v1.tar") == "tar"
    assert compression_of(SIF.layer_type) == compression_of(SIF_LAYER_V1) == "opaque"  # the first ends in .tar
    assert check_format(None) is None and check_format("docker") == "docker"
    with pytest.raises(ConfigError, match="--format 'v2s2': expected one of docker, oci"):
        check_format("v2s2")


def test_artifact_kinds_as_apptainer_decides_them() -> None:
    """apptainer (internal/pkg/client/oras) checks the SIF layer type, v1 or the Singularity < 3.7 prototype,
    and not the config type, which older versions wrote without '+json'."""
    def manifest(config: str, layer: str) -> dict:
        return {"config": {"mediaType": config}, "layers": [{"mediaType": layer}]}

    assert SIF.layer_types() == ("appliciation/vnd.sylabs.sif.layer.tar", "application/vnd.sylabs.sif.layer.v1.sif")
    assert SIF.config_type == "application/vnd.sylabs.sif.config.v1+json"
    assert SIF.layer_type == SIF_LAYER_PROTO  # what a .sif goes up with unless a site pulls v1
    assert kind_of_manifest(manifest(SIF.config_type, SIF_LAYER_V1)) is SIF
    assert kind_of_manifest(manifest("application/vnd.sylabs.sif.config.v1", SIF_LAYER_V1)) is SIF
    assert kind_of_manifest(manifest("application/vnd.oci.image.config.v1+json", SIF_LAYER_PROTO)) is SIF
    assert kind_of_manifest(manifest(SQSH.config_type, SQSH.layer_type)) is SQSH
    assert kind_of_manifest(manifest("application/vnd.oci.image.config.v1+json", DOCKER_LAYER_GZIP)) is None
    assert kind_of_manifest({"layers": "junk", "config": []}) is None
    assert (SIF.mode, SQSH.mode) == (0o755, 0o644)


def test_a_compressed_archive_member_is_checked_against_its_diff_id(tmp_path: Path) -> None:
    from buildkit.registry.transfer.layers import Uploader

    tar = b"plain tar bytes" * 1000
    gz = gzip.compress(tar[:7000]) + gzip.compress(tar[7000:])  # two members, as some tools write
    path = tmp_path / "layer.gz"
    path.write_bytes(b"junk" + gz)
    good = "sha256:" + hashlib.sha256(tar).hexdigest()
    uploader = Uploader(None, "repo", tmp_path)  # type: ignore[arg-type]  # hashing needs no registry
    try:
        layer = LayerSource(path, 4, len(gz), "layer 1", "gzip", diff_id=good)
        assert uploader._hash(layer) == "sha256:" + hashlib.sha256(gz).hexdigest()
        with pytest.raises(IntegrityError, match="layer 1 does not match its diff_id"):
            uploader._hash(LayerSource(path, 4, len(gz), "layer 1", "gzip", diff_id="sha256:" + "0" * 64))
        with pytest.raises(IntegrityError, match="layer 1: corrupt gzip data"):
            uploader._hash(LayerSource(path, 0, len(gz) + 4, "layer 1", "gzip", diff_id=good))
    finally:
        uploader.abort()
