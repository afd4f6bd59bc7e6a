"""Push, pull, convert and lock through ckit's whole registry client against an in-memory registry on loopback
(:mod:`tests.unit.fake_registry`): images from an OCI layout, .sif artifacts, chunked uploads, ranged
downloads, mounts and the HEAD-only digest. Work is counted in requests, never timed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildkit.errors import ConfigError
from buildkit.image.convert import convert
from buildkit.image.speed.tuning import TUNED
from buildkit.registry import pull as pulling
from buildkit.registry.distribution import blobstream
from buildkit.registry.distribution.client import RegistryClient
from buildkit.registry.distribution.head import head_digest
from buildkit.registry.distribution.reference import parse
from buildkit.registry.lock import resolve_base
from buildkit.registry.push import PushOptions, push
from buildkit.registry.source import reader
from buildkit.storage.store import Store
from tests.unit.fake_image import StreamedSource, docker_archive, oci_layout, sample_layers
from tests.unit.fake_registry import State, serving_alone

BLOB_WRITES = r"/blobs/uploads/"


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, State]]:
    with serving_alone(tmp_path, monkeypatch, SOURCE_DATE_EPOCH="1700000000") as served:
        yield served


def pushed_layout(host: str, tmp_path: Path, name: str = "team/app:1") -> str:
    layout = oci_layout(tmp_path / "layout", sample_layers())
    ref = parse(f"{host}/{name}")
    outcome = push(RegistryClient.for_reference(ref), f"oci:{layout}:1", ref, PushOptions())
    assert outcome.kind == "image" and outcome.digest.startswith("sha256:")
    return outcome.digest


def test_an_image_pushed_from_a_layout_converts_back_and_a_second_push_uploads_nothing(
        registry: tuple[str, State], tmp_path: Path) -> None:
    host, state = registry
    digest = pushed_layout(host, tmp_path)
    uploads = state.count("POST", BLOB_WRITES)
    assert uploads == 4  # three layers and the config
    assert pushed_layout(host, tmp_path) == digest  # the same manifest again
    assert state.count("POST", BLOB_WRITES) == uploads  # every blob was there: none sent twice
    result = convert(f"docker://{host}/team/app:1", "sqsh", store=Store(tmp_path / "store"), registry=reader())
    streamed = convert(StreamedSource(sample_layers()), "sqsh", store=Store(tmp_path / "streamed"), tuning=TUNED)
    assert result.size > 0 and not result.cache_hit
    # the same tree: only the provenance line in /etc/rc (where each came from) differs, a few bytes
    assert abs(result.size - streamed.size) < 4096


def test_large_blobs_are_read_in_ranges(registry: tuple[str, State], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    host, state = registry
    pushed_layout(host, tmp_path)
    monkeypatch.setenv("CKIT_PULL_PIECE", str(64 << 10))
    monkeypatch.setattr(blobstream, "FAST", float("inf"))  # pieces, whatever the speed
    whole = convert(f"docker://{host}/team/app:1", "sif", store=Store(tmp_path / "a"), registry=reader())
    ranged = sum(1 for method, path in state.seen if method == "GET" and "/blobs/sha256:" in path)
    assert ranged > 4  # more requests than blobs: the large layers came in pieces
    monkeypatch.setattr(blobstream, "FAST", 0)  # one more request for the rest, after the first piece
    again = convert(f"docker://{host}/team/app:1", "sif", store=Store(tmp_path / "b"), registry=reader())
    assert whole.path.read_bytes() == again.path.read_bytes()


def test_a_sif_artifact_is_pushed_chunked_and_pulled_back(registry: tuple[str, State], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    host, state = registry
    sif = convert(StreamedSource(sample_layers()), "sif", store=Store(tmp_path / "s"),
                  output=tmp_path / "app.sif").path
    monkeypatch.setattr(RegistryClient, "chunk_size", 128 << 10)
    ref = parse(f"{host}/team/app:sif")
    outcome = push(RegistryClient.for_reference(ref), str(sif), ref, PushOptions(stack="demo"))
    assert outcome.kind == "sif" and outcome.annotations
    assert state.count("PATCH", BLOB_WRITES) > 1  # the file went up in chunks
    got = pulling.pull(RegistryClient.for_reference(ref), ref, tmp_path / "out")
    assert Path(got["path"]).read_bytes() == sif.read_bytes() and got["kind"] == "sif"
    with pytest.raises(ConfigError, match="artifact; --to sqsh converts container images only"):
        pulling.plan(RegistryClient.for_reference(ref), ref, to="sqsh")


def test_an_image_is_pulled_only_with_to_and_then_converted(registry: tuple[str, State], tmp_path: Path) -> None:
    host, _ = registry
    pushed_layout(host, tmp_path)
    ref = parse(f"{host}/team/app:1")
    with pytest.raises(ConfigError, match="is a container image, not a .sif/.sqsh artifact"):
        pulling.plan(RegistryClient.for_reference(ref), ref)
    got = pulling.pull(RegistryClient.for_reference(ref), ref, tmp_path / "out", to="sqsh")
    assert Path(got["path"]).name == "app_1.sqsh" and got["digest"] in got["reference"]


def test_a_digest_is_read_by_head_alone_and_a_base_is_locked_to_it(registry: tuple[str, State],
                                                                    tmp_path: Path) -> None:
    host, state = registry
    digest = pushed_layout(host, tmp_path)
    gets = state.count("GET", "/manifests/")
    assert head_digest(host, "team/app", "1", None) == digest
    assert head_digest(host, "team/app", "missing", None) is None
    assert state.count("GET", "/manifests/") == gets  # HEAD only
    client = RegistryClient(host)
    ref, head = resolve_base(f"{host}/team/app:1", lambda r: client.head_manifest(r.repository, r.reference))
    assert head.digest == digest and ref.repository == "team/app"


def test_a_docker_archive_is_pushed_with_its_layers_gzipped_on_the_way(registry: tuple[str, State],
                                                                        tmp_path: Path) -> None:
    host, state = registry
    archive = docker_archive(tmp_path / "save.tar", {"localhost/app:1": sample_layers()})
    ref = parse(f"{host}/team/saved:1")
    outcome = push(RegistryClient.for_reference(ref), f"docker-archive:{archive}", ref, PushOptions())
    media, body = state.manifests[("team/saved", "1")]
    manifest = json.loads(body)
    assert media == outcome.media_type == "application/vnd.docker.distribution.manifest.v2+json"
    assert [layer["mediaType"] for layer in manifest["layers"]] == [
        "application/vnd.docker.image.rootfs.diff.tar.gzip"] * 3
    assert all(state.blobs[layer["digest"]][:2] == b"\x1f\x8b" for layer in manifest["layers"])
    sent = state.count("PUT", BLOB_WRITES)
    assert sent == 4  # three layers and the config
    oci = parse(f"{host}/team/saved:oci")
    again = push(RegistryClient.for_reference(oci), f"docker-archive:{archive}", oci, PushOptions(format="oci"))
    assert again.media_type == "application/vnd.oci.image.manifest.v1+json"
    assert state.count("PUT", BLOB_WRITES) == sent  # the layers gzipped once are known: none compressed or sent again
    converted = convert(f"docker://{host}/team/saved:oci", "sqsh", store=Store(tmp_path / "s"), registry=reader())
    assert converted.size > 0
