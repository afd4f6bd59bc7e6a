from __future__ import annotations

import base64
import io
import json
import stat
from pathlib import Path

import pytest
import requests
import urllib3

from buildkit.errors import ConfigError, RegistryError
from buildkit.registry.distribution import auth
from buildkit.registry.distribution.tokens import Authenticator, parse_challenge, scope_for


@pytest.fixture
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    for name in (auth.ENV_USER, auth.ENV_PASSWORD, auth.ENV_HOST):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "config.json"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_auths_entries_are_found_by_host_and_url_forms(docker_config: Path) -> None:
    docker_config.write_text(json.dumps({"auths": {
        "reg.example.org:5000": {"auth": _b64("alice:s3cret:with:colons")},
        "https://other.example.org": {"auth": _b64("bob:pw")},
        auth.DOCKER_HUB_KEY: {"auth": _b64("hubuser:hubpw")},
        "tok.example.org": {"identitytoken": "refresh-me"},
    }}))
    found = auth.resolve("reg.example.org:5000")
    assert (found.username, found.password, found.source) == ("alice", "s3cret:with:colons", str(docker_config))
    assert auth.resolve("other.example.org").username == "bob"
    assert auth.resolve("docker.io").username == "hubuser"
    assert auth.resolve("tok.example.org").is_identity_token
    assert auth.resolve("unknown.example.org") is None
    assert "s3cret" not in repr(found)


def test_environment_wins_and_can_be_limited_to_one_host(docker_config: Path, monkeypatch) -> None:
    docker_config.write_text(json.dumps({"auths": {"r.io": {"auth": _b64("file:pw")}}}))
    monkeypatch.setenv(auth.ENV_USER, "ci")
    monkeypatch.setenv(auth.ENV_PASSWORD, "ci-pw")
    assert auth.resolve("r.io").username == "ci"
    monkeypatch.setenv(auth.ENV_HOST, "elsewhere.io")
    assert auth.resolve("r.io").username == "file"
    assert auth.resolve("elsewhere.io").source == "environment"


def test_store_writes_base64_auth_with_mode_0600_and_keeps_other_keys(docker_config: Path) -> None:
    docker_config.write_text(json.dumps({"auths": {"a.io": {"auth": _b64("x:y")}}, "psFormat": "table"}))
    where = auth.store("r.io:5000", auth.Credentials("u", "p"))
    assert where == str(docker_config)
    assert stat.S_IMODE(docker_config.stat().st_mode) == 0o600
    assert json.loads(docker_config.read_text()) == {
        "auths": {"a.io": {"auth": _b64("x:y")}, "r.io:5000": {"auth": _b64("u:p")}}, "psFormat": "table"}
    assert list(docker_config.parent.glob(".config.json.*")) == []


def test_broken_config_and_auth_values_name_the_file(docker_config: Path) -> None:
    docker_config.write_text("{not json")
    with pytest.raises(ConfigError) as err:
        auth.resolve("r.io")
    assert str(docker_config) in str(err.value)
    docker_config.write_text(json.dumps({"auths": {"r.io": {"auth": "%%%"}}}))
    with pytest.raises(ConfigError) as err:
        auth.resolve("r.io")
    assert "auths['r.io'].auth is not base64" in str(err.value)


@pytest.mark.parametrize(("header", "scheme", "params"), [
    ('Bearer realm="https://auth.example.org/token",service="registry.example.org",'
     'scope="repository:team/app:pull,push"', "bearer",
     {"realm": "https://auth.example.org/token", "service": "registry.example.org",
      "scope": "repository:team/app:pull,push"}),
    ('Basic realm="ckit-test-realm"', "basic", {"realm": "ckit-test-realm"}),
    ('Bearer realm="http://127.0.0.1:5013/token", error="invalid_token"', "bearer",
     {"realm": "http://127.0.0.1:5013/token", "error": "invalid_token"}),
    ('Bearer realm="a\\"b",service=bare', "bearer", {"realm": 'a"b', "service": "bare"}),
])
def test_parse_challenge(header: str, scheme: str, params: dict[str, str]) -> None:
    challenge = parse_challenge(header)
    assert challenge is not None
    assert (challenge.scheme, challenge.params) == (scheme, params)


def test_scope_and_empty_challenge() -> None:
    assert scope_for("team/app", "pull") == "repository:team/app:pull"
    assert parse_challenge("") is None


def _response(status: int, challenge: str) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response.headers["WWW-Authenticate"] = challenge
    return response


def test_basic_challenge_without_credentials_asks_for_login() -> None:
    authenticator = Authenticator("r.io", requests.Session(), None)
    with pytest.raises(RegistryError) as err:
        authenticator.on_unauthorized(_response(401, 'Basic realm="x"'), [], sent_auth=False)
    assert str(err.value) == ("registry r.io requires authentication\n  hint: run `ckit login r.io` or set "
                              "CKIT_REGISTRY_USER and CKIT_REGISTRY_PASSWORD")


def test_basic_challenge_then_header_then_rejection() -> None:
    creds = auth.Credentials("u", "pw", source="test")
    authenticator = Authenticator("r.io", requests.Session(), creds)
    assert authenticator.headers(["repository:a:pull"]) == {}
    authenticator.on_unauthorized(_response(401, 'Basic realm="x"'), [], sent_auth=False)
    assert authenticator.headers(["repository:a:pull"]) == {"Authorization": "Basic " + _b64("u:pw")}
    with pytest.raises(RegistryError) as err:
        authenticator.on_unauthorized(_response(401, 'Basic realm="x"'), [], sent_auth=True)
    assert "pw" not in str(err.value).replace("password", "")
    assert str(err.value).startswith("registry r.io rejected the credentials of user 'u' (from test)")


class _RecordingSession(requests.Session):
    """Records token requests instead of sending them; answers with a token."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, object]] = []

    def request(self, method, url, **kwargs):  # type: ignore[no-untyped-def, override]
        self.calls.append((url, kwargs.get("auth")))
        response = requests.Response()
        response.status_code = 200
        response.raw = urllib3.HTTPResponse(body=io.BytesIO(b'{"token": "t0k3n", "expires_in": 300}'),
                                            preload_content=False)
        return response


@pytest.mark.parametrize("realm, host, insecure, allowed", [
    ("https://auth.example.org/token", "r.io", False, True),  # https: anywhere
    ("http://127.0.0.1:9999/token", "r.io", False, True),  # loopback
    ("http://localhost/token", "r.io", False, True),
    ("http://auth.example.org/token", "r.io", False, False),  # clear text to another host: never
    ("http://r.io:5000/token", "r.io:5000", True, True),  # --insecure: the registry's own host
    ("http://r.io:5000/token", "r.io:5000", False, False),
    ("http://evil.example.org/token", "r.io", True, False),  # --insecure does not extend to other hosts
])
def test_credentials_reach_a_token_realm_only_over_https_or_loopback(realm: str, host: str, insecure: bool,
                                                                     allowed: bool) -> None:
    session = _RecordingSession()
    creds = auth.Credentials("alice", "s3cret", source="test")
    authenticator = Authenticator(host, session, creds, insecure=insecure)
    authenticator.on_unauthorized(_response(401, f'Bearer realm="{realm}",service="r"'), [], sent_auth=False)
    if allowed:
        assert authenticator.headers(["repository:a:pull"]) == {"Authorization": "Bearer t0k3n"}
        assert session.calls == [(realm, ("alice", "s3cret"))]
        return
    with pytest.raises(RegistryError) as err:
        authenticator.headers(["repository:a:pull"])
    assert "does not send credentials there" in str(err.value) and "s3cret" not in str(err.value)
    assert session.calls == []


def test_anonymous_token_requests_may_use_any_realm() -> None:
    session = _RecordingSession()
    authenticator = Authenticator("r.io", session, None)
    authenticator.on_unauthorized(_response(401, 'Bearer realm="http://auth.example.org/t"'), [], sent_auth=False)
    assert authenticator.headers(["repository:a:pull"]) == {"Authorization": "Bearer t0k3n"}
    assert session.calls == [("http://auth.example.org/t", None)]
