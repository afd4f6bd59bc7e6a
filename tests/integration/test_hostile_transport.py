"""A hostile registry on loopback: no answer holds ckit, fills its memory or crashes it; transient failures are retried.

The registry serves one ``.sif`` artifact; each test scripts one misbehaviour: a body or headers that drip one byte
at a time, a blob shorter or far longer than announced, endless manifest, error and token bodies, 429 and 5xx with
and without ``Retry-After``, a bad ``Range`` on a chunked upload, a redirect loop. Limits are set small through
their environment variables (docs/safety.md) so that each case takes seconds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.adversary import Ran, clean_failure, no_leftovers, run
from tests.integration.hostile_registry import HostileServer, Raw, Reply, Seen, drip, endless
from tests.integration.registry_helpers import fake_sif

FAST = {"CKIT_HTTP_TIMEOUT": "2", "CKIT_HTTP_RETRIES": "2", "CKIT_HTTP_RETRY_WAIT": "1"}
SIF_CONFIG = "application/vnd.sylabs.sif.config.v1+json"
SIF_LAYER = "application/vnd.sylabs.sif.layer.v1.sif"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class ArtifactRegistry:
    """A plain registry holding ``team/app:1`` (a .sif); ``script(request)`` may replace any answer."""

    def __init__(self, payload: bytes, script: Callable[[Seen], Reply | None] = lambda r: None) -> None:
        self.blob = payload
        self.config = b"{}"
        self.manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": SIF_CONFIG, "digest": digest(self.config), "size": len(self.config)},
            "layers": [{"mediaType": SIF_LAYER, "digest": digest(payload), "size": len(payload),
                        "annotations": {"org.opencontainers.image.title": "app.sif"}}]}).encode()
        self.script = script
        self.server = HostileServer(self.handle)

    def handle(self, request: Seen) -> Reply:
        scripted = self.script(request)
        if scripted is not None:
            return scripted
        path = request.path.split("?")[0]
        if path == "/v2/":
            return 200, {}, b"{}"
        if "/manifests/" in path:
            return 200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json",
                         "Docker-Content-Digest": digest(self.manifest)}, self.manifest
        if path.endswith(digest(self.blob)):
            return 200, {}, self.blob
        return 404, {}, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}'

    def pull(self, tmp_path: Path, **env: str) -> Ran:
        return run("pull", f"{self.server.host}/team/app:1", "-o", str(tmp_path / "out"),
                   env={"CKIT_CACHE_DIR": str(tmp_path / "cache"), **FAST, **env}, timeout=90)


def counted(seen: list[Seen], part: str) -> int:
    return sum(1 for r in seen if part in r.path)


def nothing_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert not (out / "app.sif").exists()
    assert not out.exists() or no_leftovers(out) == []


def test_a_blob_that_drips_one_byte_at_a_time_is_abandoned(tmp_path: Path) -> None:
    payload = fake_sif(tmp_path / "a.sif").read_bytes()

    def slow(request: Seen) -> Reply | None:
        if request.path.endswith(digest(payload)):
            return 200, {"Content-Length": str(len(payload))}, drip(payload, every=0.2, size=16)
        return None

    registry = ArtifactRegistry(payload, slow)
    with registry.server:
        ran = registry.pull(tmp_path)
    clean_failure(ran, 1, says="stalled")
    assert ran.seconds < 30
    nothing_written(tmp_path)


def test_a_manifest_that_drips_ends_at_the_deadline(tmp_path: Path) -> None:
    def slow(request: Seen) -> Reply | None:
        if "/manifests/" in request.path:
            body = json.dumps({"schemaVersion": 2, "pad": "x" * 200}).encode()
            return 200, {"Content-Length": str(len(body))}, drip(body, every=0.1)
        return None

    registry = ArtifactRegistry(b"x", slow)
    with registry.server:
        ran = registry.pull(tmp_path, CKIT_HTTP_RETRIES="0")
    clean_failure(ran, 1, says="no complete answer within 2 s")
    assert ran.seconds < 20


def test_headers_that_drip_end_at_the_deadline(tmp_path: Path) -> None:
    def slow(request: Seen) -> Reply | None:
        if "/manifests/" in request.path:
            return 200, {}, Raw(drip(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: y\r\n" * 200, every=0.1, size=2))
        return None

    registry = ArtifactRegistry(b"x", slow)
    with registry.server:
        ran = registry.pull(tmp_path, CKIT_HTTP_RETRIES="0")
    clean_failure(ran, 1, says="no complete answer within 2 s")
    assert ran.seconds < 20


@pytest.mark.parametrize("after", ["1", "86400", "Wed, 21 Oct 2099 07:28:00 GMT"])
def test_429_is_retried_honouring_retry_after_within_a_cap(tmp_path: Path, after: str) -> None:
    payload = fake_sif(tmp_path / "a.sif").read_bytes()
    refusals = [2]

    def busy(request: Seen) -> Reply | None:
        if "/manifests/" in request.path and refusals[0] > 0:
            refusals[0] -= 1
            return 429, {"Retry-After": after}, b'{"errors":[{"code":"TOOMANYREQUESTS"}]}'
        return None

    registry = ArtifactRegistry(payload, busy)
    with registry.server:
        ran = registry.pull(tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "out" / "app.sif").read_bytes() == payload
    assert "retrying in 1.0 s" in ran.stderr  # Retry-After honoured, capped at CKIT_HTTP_RETRY_WAIT
    assert 2 <= ran.seconds < 30


def test_server_errors_are_retried_a_bounded_number_of_times(tmp_path: Path) -> None:
    registry = ArtifactRegistry(b"x", lambda r: (500, {}, b"oops") if "/manifests/" in r.path else None)
    with registry.server:
        ran = registry.pull(tmp_path)
    clean_failure(ran, 1, says="answered 500")
    assert counted(registry.server.seen, "/manifests/") == 3  # the first try and CKIT_HTTP_RETRIES=2 more


def test_a_broken_answer_is_retried_then_the_pull_succeeds(tmp_path: Path) -> None:
    payload = fake_sif(tmp_path / "a.sif").read_bytes()
    breaks = [1]

    def flaky(request: Seen) -> Reply | None:
        if "/manifests/" in request.path and breaks[0]:
            breaks[0] -= 1
            return 200, {}, Raw([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"sch"])  # then it hangs up
        return None

    registry = ArtifactRegistry(payload, flaky)
    with registry.server:
        ran = registry.pull(tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "the connection broke (ProtocolError)" in ran.stderr
    assert counted(registry.server.seen, "/manifests/") == 2  # the broken answer and its retry
    assert (tmp_path / "out" / "app.sif").read_bytes() == payload


def test_a_blob_that_breaks_off_is_one_clear_error(tmp_path: Path) -> None:
    payload = fake_sif(tmp_path / "a.sif").read_bytes()

    def short(request: Seen) -> Reply | None:
        if request.path.endswith(digest(payload)):
            return 200, {"Content-Length": str(len(payload))}, iter([payload[:1000]])
        return None

    registry = ArtifactRegistry(payload, short)
    with registry.server:
        ran = registry.pull(tmp_path)
    clean_failure(ran, 1, says="broke off after 1000 bytes")  # not retried mid-stream: one clear error
    nothing_written(tmp_path)


@pytest.mark.parametrize("announced", ["10", "99999999999999999999"])
def test_a_blob_whose_length_lies_is_refused(tmp_path: Path, announced: str) -> None:
    payload = fake_sif(tmp_path / "a.sif").read_bytes()

    def lying(request: Seen) -> Reply | None:
        if request.path.endswith(digest(payload)):
            return 200, {"Content-Length": announced}, payload[:5]
        return None

    registry = ArtifactRegistry(payload, lying)
    with registry.server:
        ran = registry.pull(tmp_path)
    clean_failure(ran, 4, says=f"announces {announced} bytes")
    nothing_written(tmp_path)


@pytest.mark.parametrize("where", ["manifest", "error", "token", "probe"])
def test_endless_answers_are_cut_off_at_their_limit(tmp_path: Path, where: str) -> None:
    huge = endless(bytes(1 << 16), limit=30)

    def flood(request: Seen) -> Reply | None:
        path = request.path.split("?")[0]
        if where == "probe" and path == "/v2/":
            return 200, {}, huge
        if where == "token" and path == "/token":
            return 200, {}, huge
        if where == "token" and "authorization" not in request.headers:
            return 401, {"WWW-Authenticate": f'Bearer realm="http://{request.headers["host"]}/token"'}, b""
        if where == "manifest" and "/manifests/" in path:
            return 200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, huge
        if where == "error" and "/manifests/" in path:
            return 404, {}, huge
        return None

    registry = ArtifactRegistry(b"x", flood)
    with registry.server:
        ran = registry.pull(tmp_path)
    clean_failure(ran, 1, says="larger than")
    assert ran.seconds < 30


def test_a_bad_range_on_a_chunked_upload_is_an_error_not_a_crash(tmp_path: Path) -> None:
    uploads: dict[str, bytes] = {}

    def registry(request: Seen) -> Reply:
        path = request.path.split("?")[0]
        if path == "/v2/":
            return 200, {}, b"{}"
        if request.method == "HEAD":
            return 404, {}, b""
        if request.method == "POST":
            return 202, {"Location": "/v2/team/app/blobs/uploads/u1"}, b""
        if request.method == "PUT" and path.endswith("/u1") and not uploads:  # the small config blob, whole
            return 201, {}, b""
        if request.method in ("PATCH", "GET") and path.endswith("/u1"):
            uploads["u1"] = uploads.get("u1", b"") + request.body
            return 202, {"Location": "/v2/team/app/blobs/uploads/u1", "Range": "0-abc"}, b""
        return 404, {}, b""

    server = HostileServer(registry)
    sif = fake_sif(tmp_path / "app.sif")
    with server:
        ran = run("push", str(sif), f"{server.host}/team/app:1", env={"CKIT_CACHE_DIR": str(tmp_path / "c"), **FAST})
    clean_failure(ran, 1, says="bad Range '0-abc'")


def test_a_redirect_loop_is_an_error(tmp_path: Path) -> None:
    payload = fake_sif(tmp_path / "a.sif").read_bytes()

    def loop(request: Seen) -> Reply | None:
        if "/blobs/" in request.path:
            return 307, {"Location": request.path}, b""
        return None

    registry = ArtifactRegistry(payload, loop)
    with registry.server:
        ran = registry.pull(tmp_path)
    clean_failure(ran, 1, says="cannot reach registry 127.0.0.1")
    nothing_written(tmp_path)
