"""A hostile registry on loopback: credentials go only to the registry's own origin.

The registry under test names another host:port (a second loopback server that records everything) as the
upload location, or redirects a blob download there. Whatever it does, the password and the bearer token
never reach that other origin; pushes and pulls still complete where the other side needs no credentials.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from pathlib import Path

import pytest

from tests.integration.hostile_registry import HostileServer, Reply, Seen
from tests.integration.registry_helpers import ckit, fake_sif

USER, PASSWORD, TOKEN = "alice", f"pw-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Registry:
    """A scripted registry: uploads go to ``elsewhere``; blob GETs redirect there; auth is Basic or Bearer."""

    def __init__(self, scheme: str, elsewhere: HostileServer) -> None:
        self.scheme, self.elsewhere = scheme, elsewhere
        self.manifests: dict[str, bytes] = {}
        self.server = HostileServer(self.handle)

    def authorised(self, request: Seen) -> bool:
        wanted = BASIC if self.scheme == "basic" else f"Bearer {TOKEN}"
        return request.headers.get("authorization") == wanted

    def challenge(self) -> Reply:
        value = ('Basic realm="hostile"' if self.scheme == "basic" else
                 f'Bearer realm="{self.server.url}/token",service="hostile"')
        return 401, {"WWW-Authenticate": value}, b'{"errors":[{"code":"UNAUTHORIZED"}]}'

    def handle(self, request: Seen) -> Reply:
        path = request.path.split("?")[0]
        if path == "/token":
            ok = request.headers.get("authorization") == BASIC
            return (200, {}, json.dumps({"token": TOKEN}).encode()) if ok else (401, {}, b"")
        if not self.authorised(request):
            return self.challenge()
        if path == "/v2/":
            return 200, {}, b"{}"
        if "/blobs/uploads/" in path:
            return 202, {"Location": f"{self.elsewhere.url}/upload/{uuid.uuid4().hex}", "Range": "0-0"}, b""
        if "/blobs/" in path:
            if request.method == "HEAD":
                return 404, {}, b""
            return 307, {"Location": f"{self.elsewhere.url}/blob/{path.rsplit('/', 1)[1]}"}, b""
        if "/manifests/" in path:
            tag = path.rsplit("/", 1)[1]
            if request.method == "PUT":
                self.manifests[tag] = request.body
                return 201, {"Docker-Content-Digest": digest_of(request.body)}, b""
            body = self.manifests.get(tag)
            if body is None:
                return 404, {}, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}'
            return 200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json",
                         "Docker-Content-Digest": digest_of(body)}, body
        return 404, {}, b""


class Elsewhere:
    """The other origin: accepts uploads without credentials and serves the blobs it received."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.pending: dict[str, bytes] = {}
        self.server = HostileServer(self.handle)

    def handle(self, request: Seen) -> Reply:
        path, _, query = request.path.partition("?")
        if path.startswith("/upload/"):
            got = self.pending.get(path, b"") + request.body
            self.pending[path] = got
            if request.method == "PATCH":
                return 202, {"Location": f"{self.server.url}{path}", "Range": f"0-{len(got) - 1}"}, b""
            self.blobs[query.split("digest=")[1]] = got
            return 201, {}, b""
        if path.startswith("/blob/"):
            data = self.blobs.get(path.rsplit("/", 1)[1])
            return (200, {}, data) if data is not None else (404, {}, b"")
        return 404, {}, b""


def leaked(server: HostileServer) -> list[str]:
    """Every credential-looking thing the other origin received."""
    found = []
    for request in server.seen:
        text = json.dumps(request.headers) + request.body.decode("latin-1")
        found += [secret for secret in (PASSWORD, TOKEN, BASIC.split()[1]) if secret in text]
        if "authorization" in request.headers:
            found.append(f"{request.method} {request.path}: Authorization header")
    return found


@pytest.mark.parametrize("scheme", ["basic", "bearer"])
def test_credentials_never_follow_an_upload_location_or_a_redirect_to_another_origin(scheme: str,
                                                                                     tmp_path: Path) -> None:
    other = Elsewhere()
    registry = Registry(scheme, other.server)
    env = {"CKIT_REGISTRY_USER": USER, "CKIT_REGISTRY_PASSWORD": PASSWORD, "CKIT_CACHE_DIR": str(tmp_path / "c")}
    sif = fake_sif(tmp_path / "app.sif")
    with other.server, registry.server:
        ref = f"{registry.server.host}/team/app:1"
        pushed = ckit("push", str(sif), ref, "--json", env=env)
        assert pushed.returncode == 0, pushed.stderr
        assert any(r.path.startswith("/upload/") for r in other.server.seen)  # the upload did go there…
        pulled = ckit("pull", ref, "-o", str(tmp_path / "pulled"), "--json", env=env)
        assert pulled.returncode == 0, pulled.stderr
        assert any(r.path.startswith("/blob/") for r in other.server.seen)  # …and so did the download
    assert leaked(other.server) == []  # …but no password, token or Authorization header
    assert (tmp_path / "pulled" / "app.sif").read_bytes() == sif.read_bytes()
    for output in (pushed, pulled):
        assert PASSWORD not in output.stdout + output.stderr and TOKEN not in output.stdout + output.stderr
