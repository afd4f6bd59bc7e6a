"""A hostile registry on loopback for the adversary suite: any answer a test scripts, every request recorded.

``HostileServer(handler)`` serves HTTP on 127.0.0.1 (a free port) from a thread; ``handler(request)`` returns
``(status, headers, body)``. ``body`` is bytes, or an iterable of chunks written as they come (a generator may
sleep between them: :func:`drip`, :func:`endless`), or :class:`Raw` bytes written instead of the whole answer
(status line and headers included, so headers can drip too). ``Content-Length`` is the body's length unless the
handler sets one (a lie) or streams (then the connection closes at the end). Each server stops itself after
``lifetime`` seconds, so a test that forgets it (or a client that hangs on it) cannot keep it running; it reads at
most ``MAX_BODY`` bytes of any request body and stops writing when the client goes away.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 64 << 20


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


class Raw(list):  # type: ignore[type-arg]
    """Chunks of bytes written as the whole answer, status line and headers included."""


Body = bytes | Iterable[bytes]
Reply = tuple[int, dict[str, str], Body]


def drip(data: bytes, every: float, size: int = 1, limit: float = 60.0) -> Iterator[bytes]:
    """``data`` ``size`` bytes at a time, one piece every ``every`` seconds (for at most ``limit`` seconds)."""
    started = time.monotonic()
    for at in range(0, len(data), size):
        if time.monotonic() - started > limit:
            return
        yield data[at:at + size]
        time.sleep(every)


def endless(chunk: bytes = bytes(1 << 16), limit: float = 60.0) -> Iterator[bytes]:
    """As much data as the client reads, for at most ``limit`` seconds."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        yield chunk
Handler = Callable[[Seen], Reply]


@dataclass
class HostileServer:
    handler: Handler
    lifetime: float = 120.0
    seen: list[Seen] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)

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
                try:
                    self._reply(status, headers, payload)
                except OSError:  # the client went away: stop writing
                    self.close_connection = True

            def _reply(self, status: int, headers: dict[str, str], payload: Body) -> None:
                if isinstance(payload, Raw):
                    self._stream(payload)
                    self.close_connection = True
                    return
                streamed = not isinstance(payload, bytes)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if "Content-Length" not in headers and not streamed:
                    self.send_header("Content-Length", str(len(payload)))  # type: ignore[arg-type]
                if streamed or "Content-Length" in headers:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if self.command == "HEAD":
                    return
                if streamed:
                    self._stream(payload)
                else:
                    self.wfile.write(payload)  # type: ignore[arg-type]

            def _stream(self, chunks: Iterable[bytes]) -> None:
                for chunk in chunks:
                    if server.stopped.is_set():
                        return
                    self.wfile.write(chunk)
                    self.wfile.flush()

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
        self.stopped.set()
        self._timer.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()
