"""Bearer token auth: a registry configured with ``auth: token`` and the test token server (JWT, ES256)."""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildkit.errors import RegistryError
from buildkit.registry.artifacts import pull_artifact, push_artifact
from buildkit.registry.auth import Credentials
from buildkit.registry.client import RegistryClient
from buildkit.registry.reference import parse
from tests.infra.daemon import run_dir
from tests.infra.registry import PASSWORD, USERNAME, Registry
from tests.integration.registry_helpers import ckit, fake_sif, unique_repo
from tests.integration.tokenserver import SERVICE, TokenServer


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class TokenRegistry(Registry):
    """distribution with ``auth: token`` on a free 127.0.0.1 port, trusting the test token server's certificate.

    Name and port are this process's own, so parallel test workers each run their own pair.
    """

    def __init__(self, server: TokenServer) -> None:
        super().__init__(run_dir())
        self.server = server
        self.name = f"registry-token-{os.getpid()}"
        self.port = _free_port()

    def config(self) -> dict[str, object]:
        return {**super().config(), "auth": self.server.registry_auth()}

    def healthy(self) -> bool:  # always start our own: the token server's key is new each session
        return False


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
