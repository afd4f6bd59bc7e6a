"""A blob's bytes in order as they arrive, fetched as several byte ranges at once where that helps.

One HTTP stream per blob leaves a slow link or a slow registry under-used for a large layer; registries serve
byte ranges of blobs (``Range: bytes=A-B``, answered ``206``). A blob larger than two pieces (``CKIT_PULL_PIECE``)
is first asked for its first piece, which doubles as the probe: a registry that ignores ``Range`` answers ``200``
with the whole blob, which is then read as one stream; one that answers a range it was not asked for is refused.
When that first piece came faster than gzip can consume it (:data:`FAST`), the rest is one more ranged stream
(more requests would only cost); else it is fetched as pieces, :data:`STREAMS` requests in flight, handed out
in order.

Memory stays bounded: a blob holds at most :data:`STREAMS` + 1 pieces, and all downloads through one client
together ``HELD_PIECES`` (the client's ``pieces``: a conversion reads its layers through one client).
A piece whose answer breaks off is asked for again (up to ``CKIT_HTTP_RETRIES`` times). Nothing here verifies
the digest: the caller hashes the bytes in order (:mod:`buildkit.image.layers.layerfile`) and nothing counts until
they match.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from ...config import limits
from ...errors import IntegrityError, RegistryError
from ...oci.digest import parse_digest
from ...outside import ascii_int
from . import transport
from .tokens import scope_for

if TYPE_CHECKING:
    from .client import RegistryClient

log = logging.getLogger("ckit.registry")

STREAMS = 3  # range requests of one blob in flight
FAST = 200 << 20  # bytes/s: a first piece that came this fast says one stream is enough (gzip reads ~250 MB/s)
READ = 1 << 20
CONTENT_RANGE = re.compile(r"bytes ([0-9]+)-([0-9]+)/([0-9]+|\*)")


class _Stopped(Exception):
    """The consumer went away: a piece fetch ends early."""


def blob_chunks(client: RegistryClient, repo: str, digest: str, size: int) -> Iterator[bytes]:
    """The ``size`` bytes of blob ``digest`` in order (unverified). Closing the iterator early stops the
    downloads at their next read."""
    parse_digest(digest, f"blob of {client.host}/{repo}")  # a digest names a URL only once it is valid
    fetch = _Fetch(client, repo, digest, size)
    piece = limits.size("pull_piece")
    if size <= 2 * piece:
        yield from fetch.whole(fetch.get())
        return
    began = time.monotonic()
    first = fetch.get(0, piece)
    if first.status_code == 200:  # ranges not served: this answer is the whole blob
        log.debug("%s: no range requests; one stream", fetch.what)
        yield from fetch.whole(first)
        return
    head = fetch.piece(0, piece, first)
    speed = piece / max(time.monotonic() - began, 1e-6)
    yield from _handed(head)
    if speed >= FAST:  # one answer outruns the decompression already: more requests would only cost
        yield from fetch.whole(fetch.get(piece, size - piece), size - piece)
    else:
        yield from fetch.pieces(piece, piece)


def _handed(parts: list[bytes]) -> Iterator[bytes]:
    """A piece's parts in order, each let go once handed on: a piece read is not held whole until the next one
    is in (nor, for the first, while the rest of its blob streams: 4 MiB per layer, for minutes)."""
    parts.reverse()
    while parts:
        yield parts.pop()


class _Fetch:
    def __init__(self, client: RegistryClient, repo: str, digest: str, size: int) -> None:
        self.client, self.repo, self.size = client, repo, size
        self.path = f"/v2/{repo}/blobs/{digest}"
        self.what = f"blob {client.host}/{repo}@{digest}"
        self.stop = threading.Event()

    def get(self, start: int | None = None, length: int = 0):  # type: ignore[no-untyped-def]
        """A streamed GET of the blob, or of ``length`` bytes from ``start`` (200 or 206 accepted)."""
        headers = {} if start is None else {"Range": f"bytes={start}-{start + length - 1}"}
        response = self.client.request("GET", self.path, [scope_for(self.repo, "pull")], ok=(200, 206),
                                       stream=True, headers=headers, what=self.what)
        announced = response.headers.get("Content-Length", "")
        if response.status_code == 200 and ascii_int(announced) not in (None, self.size):
            response.close()
            raise IntegrityError(f"{self.what}: the registry announces {announced} bytes, its descriptor says "
                                 f"{self.size}", hint="the content is corrupt or was altered; nothing was written")
        if response.status_code == 206 and start is not None:
            self._check_range(response, start, length)
        elif response.status_code == 206:
            response.close()
            raise RegistryError(f"{self.what}: the registry answered 206 to a request without a range")
        return response

    def _check_range(self, response, start: int, length: int) -> None:  # type: ignore[no-untyped-def]
        got = CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
        want = (start, start + length - 1)
        if got is None or (int(got[1]), int(got[2])) != want or got[3] not in ("*", str(self.size)):
            response.close()
            raise RegistryError(f"{self.what}: asked for bytes {want[0]}-{want[1]}, the registry answered "
                                f"Content-Range {response.headers.get('Content-Range', '(none)')!r}",
                                hint="the registry mishandles range requests; CKIT_PULL_PIECE larger than the "
                                     "blob reads it as one stream")

    def whole(self, response, length: int | None = None) -> Iterator[bytes]:  # type: ignore[no-untyped-def]
        """The answer's body as it arrives: the whole blob, or the ``length`` bytes of a range."""
        length = self.size if length is None else length
        body = transport.StreamBody(response, self.what, length)
        try:
            while data := body.read(READ):
                yield data
        finally:
            response.close()
        if body.total != length:
            raise RegistryError(f"{self.what}: the answer ended after {body.total} of {length} bytes",
                                hint="try again; the registry or network failed")

    def piece(self, start: int, length: int, response=None) -> list[bytes]:  # type: ignore[no-untyped-def]
        """``length`` bytes from ``start`` as the reads brought them (no copy into one buffer), asked for again
        when the answer breaks off or comes short."""
        attempts = int(limits.get("http_retries")) + 1
        for attempt in range(attempts):
            response = response or self.get(start, length)
            body = transport.StreamBody(response, self.what, length)
            parts, got = [], 0
            try:
                while got < length and (data := body.read(min(READ, length - got))):
                    if self.stop.is_set():
                        raise _Stopped
                    parts.append(data)
                    got += len(data)
            except RegistryError as err:
                if attempt + 1 == attempts:
                    raise
                log.warning("%s: %s; asking for bytes %d-%d again", self.what, err.message, start, start + length - 1)
                continue
            finally:
                response.close()
                response = None
            if got == length:
                return parts
            if attempt + 1 == attempts:
                raise RegistryError(f"{self.what}: the answer for bytes {start}-{start + length - 1} ended after "
                                    f"{got} bytes", hint="try again; the registry or network failed")
        raise AssertionError("unreachable")  # pragma: no cover

    def pieces(self, begin: int, piece: int) -> Iterator[bytes]:
        """The blob as pieces fetched :data:`STREAMS` at a time, yielded in order. Every piece takes one of the
        client's places (``pieces``) until it is handed out, so several layers downloading at once hold at most
        that many pieces together. A download waits for a place only while it holds none: one that holds some
        always gets its oldest piece back and frees its place, so the downloads never wait on each other in a
        circle."""
        starts, held = collections.deque(range(begin, self.size, piece)), self.client.pieces
        pool = ThreadPoolExecutor(max_workers=STREAMS, thread_name_prefix="pull-range")
        pending: collections.deque[Future[list[bytes]]] = collections.deque()
        try:
            while pending or starts:
                while starts and len(pending) <= STREAMS and held.acquire(blocking=not pending):
                    start = starts.popleft()
                    pending.append(pool.submit(self.piece, start, min(piece, self.size - start)))
                try:
                    data = pending.popleft().result()
                finally:
                    held.release()
                yield from _handed(data)
        finally:
            self.stop.set()  # the consumer stopped or failed: running fetches end at their next read
            for future in pending:
                future.cancel()
                held.release()
            pool.shutdown(wait=True, cancel_futures=True)
