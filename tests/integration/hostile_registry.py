"""A hostile registry on loopback for the adversary suite: any answer a test scripts, every request recorded.

``HostileServer(handler)`` serves HTTP on 127.0.0.1 (a free port) from a thread; ``handler(request)`` returns
``(status, headers, body)``. Each server stops itself after ``lifetime`` seconds, so a test that forgets it (or a
client that hangs on it) cannot keep it running, and reads at most ``MAX_BODY`` bytes of any request body.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 64 << 20


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


Reply = tuple[int, dict[str, str], bytes]
Handler = Callable[[Seen], Reply]


@dataclass
class HostileServer:
    handler: Handler
    lifetime: float = 120.0
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        server = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _serve(self) -> None:
                length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
                body = self.rfile.read(length) if length else b""
                request = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                server.seen.append(request)
                status, headers, payload = server.handler(request)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._timer = threading.Timer(self.lifetime, self.stop)
        self._timer.daemon = True

    def __enter__(self) -> HostileServer:
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._timer.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()
