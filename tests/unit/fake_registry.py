"""An OCI distribution registry in memory, served on loopback from a thread: the far end of ckit's registry client
faked, everything on ckit's side real (its transport, auth, uploads, ranged downloads). Manifests by tag and
digest; blobs with ``Range``; uploads monolithic, chunked (``PATCH``, with status) or mounted. Every request is
recorded, so a test counts work (uploads, blob reads) instead of timing it."""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    import pytest

MANIFEST = re.compile(r"^/v2/(?P<repo>.+)/manifests/(?P<ref>[^/]+)$")
BLOB = re.compile(r"^/v2/(?P<repo>.+)/blobs/(?P<digest>sha256:[0-9a-f]{64})$")
UPLOADS = re.compile(r"^/v2/(?P<repo>.+)/blobs/uploads/(?P<id>[0-9]*)$")


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class State:
    manifests: dict[tuple[str, str], tuple[str, bytes]] = field(default_factory=dict)  # (repo, tag|digest)
    blobs: dict[str, bytes] = field(default_factory=dict)
    uploads: dict[str, bytearray] = field(default_factory=dict)
    seen: list[tuple[str, str]] = field(default_factory=list)  # (method, path with query)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def count(self, method: str, pattern: str) -> int:
        return sum(1 for m, path in self.seen if m == method and re.search(pattern, path))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: State

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def _reply(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _route(self) -> None:
        url = urlsplit(self.path)
        with self.state.lock:
            self.state.seen.append((self.command, self.path))
        if url.path == "/v2/":
            return self._reply(200, {"Docker-Distribution-API-Version": "registry/2.0"}, b"{}")
        for pattern, handler in ((MANIFEST, self._manifest), (BLOB, self._blob), (UPLOADS, self._upload)):
            found = pattern.match(url.path)
            if found:
                return handler(found, parse_qs(url.query))
        return self._reply(404, body=b'{"errors":[{"code":"NAME_UNKNOWN"}]}')

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _route

    def _manifest(self, found: re.Match[str], query: dict[str, list[str]]) -> None:
        repo, ref = found["repo"], found["ref"]
        if self.command == "PUT":
            data, media = self._body(), self.headers.get("Content-Type", "")
            with self.state.lock:
                self.state.manifests[(repo, ref)] = self.state.manifests[(repo, digest(data))] = (media, data)
            return self._reply(201, {"Docker-Content-Digest": digest(data),
                                     "Location": f"/v2/{repo}/manifests/{digest(data)}"})
        stored = self.state.manifests.get((repo, ref))
        if stored is None:
            return self._reply(404, body=b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
        media, data = stored
        return self._reply(200, {"Content-Type": media, "Docker-Content-Digest": digest(data)}, data)

    def _blob(self, found: re.Match[str], query: dict[str, list[str]]) -> None:
        data = self.state.blobs.get(found["digest"])
        if data is None:
            return self._reply(404, body=b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        if wanted is None:
            return self._reply(200, {"Docker-Content-Digest": found["digest"]}, data)
        start = int(wanted[1])
        end = min(int(wanted[2]) if wanted[2] else len(data) - 1, len(data) - 1)
        return self._reply(206, {"Content-Range": f"bytes {start}-{end}/{len(data)}"}, data[start:end + 1])

    def _upload(self, found: re.Match[str], query: dict[str, list[str]]) -> None:
        repo, upload = found["repo"], found["id"]
        if self.command == "POST":
            mount = query.get("mount", [""])[0]
            if mount and mount in self.state.blobs:
                return self._reply(201, {"Location": f"/v2/{repo}/blobs/{mount}", "Docker-Content-Digest": mount})
            if "digest" in query:  # monolithic
                return self._finish(repo, bytearray(self._body()), query["digest"][0])
            upload = str(next(self.state.ids))
            self.state.uploads[upload] = bytearray(self._body())
            return self._reply(202, {"Location": f"/v2/{repo}/blobs/uploads/{upload}", "Range": "0-0"})
        held = self.state.uploads.get(upload)
        if held is None:
            return self._reply(404, body=b'{"errors":[{"code":"BLOB_UPLOAD_UNKNOWN"}]}')
        if self.command == "GET":
            return self._reply(204, {"Location": f"/v2/{repo}/blobs/uploads/{upload}", "Range": f"0-{len(held) - 1}"})
        held += self._body()
        if self.command == "PATCH":
            return self._reply(202, {"Location": f"/v2/{repo}/blobs/uploads/{upload}", "Range": f"0-{len(held) - 1}"})
        del self.state.uploads[upload]
        return self._finish(repo, held, query.get("digest", [""])[0])

    def _finish(self, repo: str, data: bytearray, expected: str) -> None:
        if digest(bytes(data)) != expected:
            return self._reply(400, body=b'{"errors":[{"code":"DIGEST_INVALID"}]}')
        with self.state.lock:
            self.state.blobs[expected] = bytes(data)
        return self._reply(201, {"Location": f"/v2/{repo}/blobs/{expected}", "Docker-Content-Digest": expected})


@contextmanager
def serving() -> Iterator[tuple[str, State]]:
    """A registry on 127.0.0.1 (a free port): its ``host:port`` and its state."""
    state = State()
    handler = type("Handler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serving_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> Iterator[tuple[str, State]]:
    """``serving()`` for one test whose ckit sees nothing of the machine's: its cache and Docker config in
    ``tmp_path``, no registry credentials or plain-HTTP list from the environment, and ``env`` set."""
    monkeypatch.setenv("CKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("CKIT_REGISTRY_USER", "CKIT_REGISTRY_PASSWORD", "CKIT_PLAIN"):
        monkeypatch.delenv(name, raising=False)
    with serving() as served:
        yield served
