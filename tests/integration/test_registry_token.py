"""Bearer token auth: a registry configured with ``auth: token`` and the test token server (JWT, ES256)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildkit.errors import RegistryError
from buildkit.registry.distribution.auth import Credentials
from buildkit.registry.distribution.client import RegistryClient
from buildkit.registry.distribution.reference import parse
from buildkit.registry.transfer.artifacts import pull_artifact, push_artifact
from tests.infra.registry import PASSWORD, USERNAME, Registry
from tests.integration.registry_helpers import ckit, fake_sif, unique_repo
from tests.integration.tokenserver import SERVICE, TokenRegistry, TokenServer


@pytest.fixture(scope="module")
def token_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TokenServer, Registry]]:
    server = TokenServer(tmp_path_factory.mktemp("token"), USERNAME, PASSWORD).start()
    registry = TokenRegistry(server)
    registry.start()
    try:
        yield server, registry
    finally:
        registry.stop()
        server.stop()
        shutil.rmtree(registry.home, ignore_errors=True)


def _client(registry: Registry, password: str = PASSWORD) -> RegistryClient:
    return RegistryClient(registry.host, credentials=Credentials(USERNAME, password, source="test"))


def test_token_flow_push_pull_and_per_scope_cache(token_setup, tmp_path: Path) -> None:
    server, registry = token_setup
    server.expired = False
    sif = fake_sif(tmp_path / "tok.sif")
    ref = parse(f"{registry.host}/{unique_repo()}:v1")
    client = _client(registry)
    before = len(server.issued)
    push_artifact(client, ref, sif, {})
    pull_artifact(client, ref, tmp_path / "out")
    assert (tmp_path / "out" / "tok.sif").read_bytes() == sif.read_bytes()
    scopes = [q.get("scope") for q in server.requests[-(len(server.issued) - before):]]
    # one token for push (pull,push) and one for pull: cached per scope, not one per request
    assert scopes == [[f"repository:{ref.repository}:pull"], [f"repository:{ref.repository}:pull,push"]]
    assert all(q.get("service") == [SERVICE] for q in server.requests)
    # a cached token past its lifetime is replaced by a new one
    issued = len(server.issued)
    client.auth.clock = lambda: time.monotonic() + 3600
    assert client.blob_exists(ref.repository, "sha256:" + "0" * 64) is False
    assert len(server.issued) == issued + 1


def test_cli_login_and_push_through_the_token_server(token_setup, tmp_path: Path) -> None:
    server, registry = token_setup
    server.expired = False
    env = {"DOCKER_CONFIG": str(tmp_path / "dc")}
    login = ckit("login", registry.host, "-u", USERNAME, "--password-stdin", input=PASSWORD, env=env)
    assert login.returncode == 0, login.stderr
    sif = fake_sif(tmp_path / "cli.sif")
    ref = f"{registry.host}/{unique_repo()}:v1"
    pushed = ckit("--debug", "push", str(sif), ref, "--json", env=env)
    assert pushed.returncode == 0, pushed.stderr
    for token in server.issued:
        assert token not in pushed.stdout and token not in pushed.stderr
        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert token.encode() not in path.read_bytes()


def test_wrong_password_at_the_token_server_is_one_clear_message(token_setup, tmp_path: Path) -> None:
    server, registry = token_setup
    client = _client(registry, password="wrong")
    with pytest.raises(RegistryError) as err:
        client.get_manifest(unique_repo(), "v1")
    assert str(err.value).splitlines()[0] == (
        f"token server {server.realm} rejected the credentials of user 'ckituser' for {registry.host} (401)")


def test_expired_token_is_one_clear_message(token_setup, tmp_path: Path) -> None:
    server, registry = token_setup
    server.expired = True
    try:
        sif = fake_sif(tmp_path / "exp.sif")
        ref = f"{registry.host}/{unique_repo()}:v1"
        env = {"CKIT_REGISTRY_USER": USERNAME, "CKIT_REGISTRY_PASSWORD": PASSWORD,
               "DOCKER_CONFIG": str(tmp_path / "dc")}
        pushed = ckit("push", str(sif), ref, env=env)
    finally:
        server.expired = False
    assert pushed.returncode == 1
    repo = ref.split("/", 1)[1].rsplit(":", 1)[0]
    assert pushed.stderr.splitlines()[0] == (
        f"ckit: error: registry {registry.host} rejected the access token from {server.realm} (invalid_token: "
        f"the token is expired, invalid or lacks the scope repository:{repo}:pull)")


def test_anonymous_client_is_told_to_log_in(token_setup) -> None:
    _server, registry = token_setup
    client = RegistryClient(registry.host, credentials=None)
    with pytest.raises(RegistryError) as err:
        client.get_manifest(unique_repo(), "v1")
    assert str(err.value).splitlines()[0] == f"registry {registry.host} requires authentication"


def _layer(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue())


def _oci_layout(path: Path, layers: list[bytes]) -> None:
    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    diff_ids = ["sha256:" + hashlib.sha256(gzip.decompress(layer)).hexdigest() for layer in layers]
    config = put(json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                             "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode())
    manifest = put(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **put(layer)} for layer in layers],
    }).encode())
    (path / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest,
         "annotations": {"org.opencontainers.image.ref.name": "multi"}}]}))


def test_concurrent_layer_downloads_share_one_token(token_setup, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Converting a 6-layer image from the token registry: layers download in parallel on one cached token."""
    from buildkit.image.convert import convert
    from buildkit.registry.source import reader
    from buildkit.storage.store import Store

    server, registry = token_setup
    server.expired = False
    monkeypatch.setenv("CKIT_REGISTRY_USER", USERNAME)
    monkeypatch.setenv("CKIT_REGISTRY_PASSWORD", PASSWORD)
    layers = [_layer({f"layer{i}/file": os.urandom(300_000)}) for i in range(6)]
    _oci_layout(tmp_path / "layout", layers)
    ref = f"{registry.host}/{unique_repo()}:multi"
    pushed = ckit("push", f"oci:{tmp_path / 'layout'}:multi", ref, env={"CKIT_REGISTRY_USER": USERNAME,
                                                                        "CKIT_REGISTRY_PASSWORD": PASSWORD})
    assert pushed.returncode == 0, pushed.stderr
    before = len(server.issued)
    result = convert(f"docker://{ref}", "sqsh", store=Store(tmp_path / "store"), registry=reader())
    assert len(server.issued) == before + 1  # the pull token, fetched once for the manifest and every layer
    listing = subprocess.run(["unsquashfs", "-l", str(result.path)], capture_output=True, text=True,  # noqa: S603, S607
                             check=True).stdout
    assert all(f"squashfs-root/layer{i}/file" in listing for i in range(6))
