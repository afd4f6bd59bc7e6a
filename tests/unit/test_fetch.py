"""Fetch into a cache folder (the work the Pyxis importer and ``ckit stage`` share) against an in-memory registry
on loopback (:mod:`tests.unit.fake_registry`): what it asks the registry, counted in requests, and how it tells a
registry that gave no answer (served from the cache) from one that refused."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildkit.errors import RegistryError
from buildkit.image.convert import convert
from buildkit.orchestration.fetch import Want, ensure
from buildkit.registry.distribution.client import RegistryClient
from buildkit.registry.distribution.head import head_digest
from buildkit.registry.distribution.reference import parse
from buildkit.registry.push import PushOptions, push
from buildkit.storage.cache import CacheDir
from buildkit.storage.store import Store
from tests.unit.fake_image import StreamedSource, sample_layers
from tests.unit.fake_registry import State, serving_alone

MANIFEST_READS = r"/manifests/"


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, State]]:
    with serving_alone(tmp_path, monkeypatch, CKIT_HTTP_RETRIES="0") as served:
        yield served


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_artifact_is_fetched_with_one_read_of_its_manifest(registry: tuple[str, State], tmp_path: Path) -> None:
    host, state = registry
    sqsh = convert(StreamedSource(sample_layers()), "sqsh", store=Store(tmp_path / "s"),
                   output=tmp_path / "app.sqsh").path
    ref = parse(f"{host}/team/app:sqsh")
    push(RegistryClient.for_reference(ref), str(sqsh), ref, PushOptions())
    before, said = state.count("GET", MANIFEST_READS), []
    cache = CacheDir(tmp_path / "folder")
    served = ensure(cache, Want(ref, "sqsh", "artifact"), said.append)
    assert served.converted and served.path.read_bytes() == sqsh.read_bytes()
    assert state.count("GET", MANIFEST_READS) - before == 1  # read once: to tell it from an image, then its layer
    again = ensure(cache, Want(ref, "sqsh", "artifact"), said.append)
    assert again.path == served.path and not again.converted
    assert state.count("GET", MANIFEST_READS) - before == 1  # served: the HEAD alone
    assert sum("downloading" in line for line in said) == 1


def test_a_registry_that_gives_no_answer_is_unreachable_and_one_that_refuses_is_not(
        registry: tuple[str, State], tmp_path: Path) -> None:
    host, _ = registry
    nobody = f"127.0.0.1:{closed_port()}"
    with pytest.raises(RegistryError) as lean:
        head_digest(nobody, "team/app", "1", None)
    with pytest.raises(RegistryError) as full:
        RegistryClient(nobody).head_manifest("team/app", "1")
    assert lean.value.unreachable and full.value.unreachable
    # no answer: the cache is asked (offline), which has never seen the image
    with pytest.raises(RegistryError, match="has never been cached here"):
        ensure(CacheDir(tmp_path / "folder"), Want(parse(f"{nobody}/team/app:1"), "sqsh", "zstd"), print)
    # an answer that refuses is the registry's word, never a cached copy
    with pytest.raises(RegistryError) as refused:
        ensure(CacheDir(tmp_path / "folder"), Want(parse(f"{host}/team/none:1"), "sqsh", "zstd"), print)
    assert not refused.value.unreachable and "never been cached" not in str(refused.value)
