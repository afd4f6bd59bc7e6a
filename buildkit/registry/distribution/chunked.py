"""Chunked blob upload (PATCH with Content-Range) that resumes after a broken chunk or restarts cleanly.

After a failed chunk the upload's status (``GET`` on its location, ``Range: 0-N``) says how much the
registry kept; the upload goes on from there. When the registry forgot the upload (404), it starts over
once per chunk failure, up to :data:`MAX_RESTARTS` times.

An upload whose digest is not known yet (``digest=None``) hashes the file as it sends it
(:class:`~.streams.HashingFile`) and closes with the digest it computed: one read of the file, not two.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, Protocol

import requests

from ...errors import RegistryError
from ...outside import ascii_int
from .streams import HashingFile, LimitedReader
from .tokens import scope_for

log = logging.getLogger("ckit.registry")

MAX_RESTARTS = 3


class UploadClient(Protocol):
    """What an upload asks of the registry client (:class:`.client.RegistryClient`, which starts uploads here)."""

    host: str
    chunk_size: int

    def request(self, method: str, path: str, scopes: Sequence[str], *, ok: Sequence[int] = ...,
                headers: dict[str, str] | None = ..., body: Callable[[], Any] | None = ...,
                params: dict[str, str] | None = ..., stream: bool = ..., what: str = ...,
                limit: int | None = ...) -> requests.Response: ...
    def location_of(self, response: requests.Response) -> str: ...
    def with_param(self, location: str, key: str, value: str) -> str: ...


class ChunkedUpload:
    def __init__(self, client: UploadClient, repo: str, location: str, stream: BinaryIO, digest: str | None,
                 size: int, progress: Callable[[int], None] | None) -> None:
        self.client = client
        self.repo = repo
        self.location = location
        self.hashing = HashingFile(stream) if digest is None else None
        self.stream: BinaryIO | HashingFile = self.hashing or stream
        self.digest = digest
        self.what = digest or "blob"
        self.size = size
        self.progress = progress
        self.scopes = [scope_for(repo, "pull,push")]
        self.start = stream.tell()
        self.sent = 0
        self.reported = 0

    def _report(self, upto: int) -> None:
        if self.progress and upto > self.reported:
            self.progress(upto - self.reported)
            self.reported = upto

    def run(self) -> int:
        offset = 0
        failures = 0
        while offset < self.size:
            end = min(offset + self.client.chunk_size, self.size)
            try:
                offset = self._send_chunk(offset, end)
                self._report(offset)
            except (requests.RequestException, RegistryError, OSError) as err:
                failures += 1
                if failures > MAX_RESTARTS:
                    raise RegistryError(f"upload of {self.what} to {self.client.host}/{self.repo} "
                                        f"failed {failures} times; last error: {err}") from err
                offset = self._recover()
                log.debug("chunk upload failed (%s); going on from byte %d", err.__class__.__name__, offset)
        if self.hashing is not None:
            self.digest = self.hashing.digest(self.size)
        self.client.request("PUT", self.client.with_param(self.location, "digest", str(self.digest)), self.scopes,
                            ok=(201,), headers={"Content-Length": "0"},
                            what=f"finish upload of {self.digest} to {self.client.host}/{self.repo}")
        return self.sent

    def _body(self, offset: int, length: int) -> Callable[[], LimitedReader]:
        def body() -> LimitedReader:
            self.stream.seek(self.start + offset)
            self.sent += length
            return LimitedReader(self.stream, length)
        return body

    def _send_chunk(self, offset: int, end: int) -> int:
        length = end - offset
        response = self.client.request(
            "PATCH", self.location, self.scopes, ok=(202,), body=self._body(offset, length),
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(length),
                     "Content-Range": f"{offset}-{end - 1}"},
            what=f"upload chunk of {self.what} to {self.client.host}/{self.repo}")
        self.location = self.client.location_of(response)
        return self._range_end(response, default=end)

    def _range_end(self, response: requests.Response, default: int) -> int:
        """Where the registry's kept range ends (``Range: 0-N``), checked: no further than the blob."""
        value = response.headers.get("Range", "")
        if "-" not in value:
            return default
        last = value.removeprefix("bytes=").rsplit("-", 1)[1].strip()
        end = ascii_int(last)
        if end is None or end >= max(self.size, 1):
            raise RegistryError(f"registry {self.client.host} answered an upload of {self.what} with a bad "
                                f"Range {value[:40]!r}", hint="the registry is misbehaving; try again")
        return 0 if end <= 0 else end + 1  # distribution says "0-0" for an empty upload

    def _recover(self) -> int:
        """Where to go on from: the registry's kept range, or 0 on a new upload when it forgot this one."""
        try:
            response = self.client.request("GET", self.location, self.scopes, ok=(204, 200, 404))
        except RegistryError:
            response = None
        if response is not None and response.status_code in (200, 204):
            self.location = self.client.location_of(response) if response.headers.get("Location") else self.location
            return self._range_end(response, default=0)
        response = self.client.request("POST", f"/v2/{self.repo}/blobs/uploads/", self.scopes, ok=(202,),
                                       what=f"restart upload to {self.client.host}/{self.repo}")
        self.location = self.client.location_of(response)
        return 0
