"""The OCI distribution API over ``requests``: manifests, verified blob streams, deduplicated uploads.

Transport: TLS verified by default (``ca_file`` for a private CA). ``insecure=True`` skips verification and
allows plain http; loopback hosts (127.0.0.1, localhost) may also fall back to plain http when the server
does not speak TLS. Credentials and tokens never appear in messages (see :mod:`.tokens`).

Credentials go only to the registry's own origin (scheme, host and port of its API): an upload ``Location``
or any other URL the registry names on another origin is sent without ``Authorization`` (a hostile or
misconfigured registry cannot collect the password or token that way), and redirects on the way are
stripped of it by ``requests`` as well.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import requests
import urllib3

from ...config import limits
from ...config.jsondoc import parse as parse_json
from ...errors import ConfigError, IntegrityError, RegistryError
from ...oci.digest import VerifyingReader, of_bytes, parse_digest, verify_bytes
from ...outside import ascii_int
from ...process import redact
from . import auth as auth_mod
from . import transport
from .reference import Reference, is_loopback, parse
from .streams import LimitedReader
from .tokens import Authenticator, scope_for

log = logging.getLogger("ckit.registry")

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST)
ACCEPT_ALL = ", ".join(MANIFEST_TYPES)
CHUNK_SIZE = 64 << 20
HELD_PIECES = 8  # blob pieces held by the downloads through one client together (fetched, or in flight)
AUTO: Any = object()  # "find credentials the docker way"

Progress = Callable[[int], None]


def error_details(body: bytes, most: int = 5) -> list[str]:
    """``CODE: message`` of each entry of a distribution error body (``{"errors": [...]}``), whatever its shape."""
    try:
        errors = json.loads(body).get("errors")
    except (ValueError, AttributeError, RecursionError):
        return []
    found = []
    for item in errors[:most] if isinstance(errors, list) else []:
        if isinstance(item, dict):
            code, message = str(item.get("code") or "")[:80], str(item.get("message") or "")[:200]
            found.append(f"{code}: {message}" if message else code)
    return [f for f in found if f]


@dataclass(frozen=True)
class Manifest:
    data: bytes
    media_type: str
    digest: str

    def json(self) -> dict[str, Any]:
        return parse_json(self.data, f"manifest {self.digest}", error=IntegrityError)


@dataclass(frozen=True)
class ManifestHead:
    digest: str
    media_type: str
    size: int


class RegistryClient:
    """One registry host. Methods take the repository path (``team/app``) and a tag or digest."""

    chunk_size = CHUNK_SIZE

    def __init__(self, host: str, *, insecure: bool = False, ca_file: Path | None = None,
                 credentials: auth_mod.Credentials | None = AUTO) -> None:
        if ca_file is not None and not Path(ca_file).is_file():
            raise ConfigError(f"--ca-file {ca_file}: no such file", hint="give the PEM file of the registry's CA")
        self.host = host
        self.insecure = insecure
        self.verify: bool | str = str(ca_file) if ca_file else not insecure
        self.session = transport.session()
        if credentials is AUTO:
            credentials = auth_mod.resolve(host)
        self.auth = Authenticator(host, self.session, credentials, verify=self.verify, insecure=insecure)
        self._base: str | None = None
        # the blob pieces all downloads through this client hold together (see :mod:`.blobstream`)
        self.pieces = threading.BoundedSemaphore(HELD_PIECES)
        if insecure:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)

    @classmethod
    def for_reference(cls, ref: Reference | str, insecure: bool = False,
                      ca_file: Path | None = None) -> RegistryClient:
        ref = parse(ref) if isinstance(ref, str) else ref
        return cls(ref.api_host, insecure=insecure, ca_file=ca_file)

    # -- transport -------------------------------------------------------------------------------------

    @property
    def authenticated(self) -> bool:
        """It has credentials for the registry: what it reads may be private."""
        return self.auth.credentials is not None

    def _unreachable(self, url: str, err: Exception) -> RegistryError:
        reason = str(getattr(err, "args", [""])[0] if err.args else err)
        if "refused" in reason.lower():
            why = "connection refused"
        elif "timed out" in reason.lower() or isinstance(err, requests.Timeout):
            why = "timed out"
        elif "resolve" in reason.lower() or "name or service" in reason.lower():
            why = "unknown host"
        else:
            why = err.__class__.__name__
        return RegistryError(f"cannot reach registry {self.host} ({url}): {why}",
                             hint="check the registry address and port, and that it is running",
                             unreachable=not isinstance(err, requests.exceptions.SSLError))  # TLS refused: an answer

    def base_url(self) -> str:
        """``https://host`` or, where allowed and the server speaks no TLS, ``http://host``; probed once."""
        if self._base is not None:
            return self._base
        plain_ok = (self.insecure or is_loopback(self.host)) and not isinstance(self.verify, str)
        for scheme in ("https", "http") if plain_ok else ("https",):
            url = f"{scheme}://{self.host}/v2/"
            try:
                response = transport.exchange(self.session, "GET", url, what=f"registry {self.host}",
                                              limit=limits.size("response_size"), verify=self.verify)
            except requests.exceptions.SSLError as err:
                text = str(err)
                if plain_ok and ("WRONG_VERSION_NUMBER" in text or "record layer failure" in text):
                    continue
                raise RegistryError(f"TLS connection to registry {self.host} failed: the certificate is not "
                                    f"trusted or does not match", hint="pass --ca-file PATH for a private CA, "
                                    "or --insecure to skip verification") from err
            except requests.RequestException as err:
                raise self._unreachable(url, err) from err
            if response.status_code == 401:
                self.auth.learn(response)
            elif response.status_code not in (200,):
                raise RegistryError(f"{url} answered {response.status_code}: not an OCI registry")
            self._base = f"{scheme}://{self.host}"
            log.debug("registry %s at %s", self.host, self._base)
            return self._base
        raise RegistryError(f"cannot reach registry {self.host}")

    def owns(self, url: str) -> bool:
        """``url`` is on the registry's own origin (scheme, host, port), where its credentials may go."""
        def origin(text: str) -> tuple[str, str, int | None]:
            parts = urlsplit(text)
            default = {"http": 80, "https": 443}.get(parts.scheme)
            return parts.scheme, (parts.hostname or "").lower(), parts.port or default
        return origin(url) == origin(self.base_url())

    def request(self, method: str, path: str, scopes: Sequence[str], *, ok: Sequence[int] = (200,),
                headers: dict[str, str] | None = None, body: Callable[[], Any] | None = None,
                params: dict[str, str] | None = None, stream: bool = False, what: str = "",
                limit: int | None = None) -> requests.Response:
        """Send a request with auth under the transport policy (:mod:`.transport`: deadline, retries, bodies
        read up to ``limit`` bytes unless ``stream``); retry after a 401 once the challenge is answered.
        ``body`` makes a fresh request body for each attempt. A URL on another origin gets no credentials."""
        url = path if path.startswith(("http://", "https://")) else self.base_url() + path
        what = what or f"{method} {path.split('?')[0]}"
        own = self.owns(url)
        if not own:
            log.debug("%s %s is not on %s: sent without credentials", method, url.split("?")[0], self._base)
        upload = int((headers or {}).get("Content-Length") or 0)
        for _attempt in range(3):
            auth_headers = self.auth.headers(scopes) if own else {}
            try:
                response = transport.exchange(
                    self.session, method, url, what=what, limit=limit or limits.size("response_size"),
                    stream=stream, body=body, upload_size=upload, headers={**(headers or {}), **auth_headers},
                    params=params, verify=self.verify)
            except requests.RequestException as err:
                raise self._unreachable(url.split("?")[0], err) from err
            if response.status_code != 401 or not own:
                break
            response.close()
            self.auth.on_unauthorized(response, scopes, sent_auth=bool(auth_headers))
        if response.status_code not in ok:
            response.close()
            error = self._error(response, what)
            error.message = redact(error.message, self.auth.secrets())
            raise error
        return response

    def _error(self, response: requests.Response, what: str) -> RegistryError:
        """The registry's error answer in one line (its body was read, size-capped, by the transport)."""
        status = response.status_code
        consumed = getattr(response, "_content_consumed", False)  # requests' own flag: the body was read
        detail = "; ".join(error_details(response.content if consumed else b""))
        if status == 404:
            return RegistryError(f"{what}: not found on {self.host}" + (f" ({detail})" if detail else ""),
                                 hint="check the repository and tag")
        if status == 403:
            return RegistryError(f"{what}: access denied by {self.host}",
                                 hint="the account may not access this repository")
        if status == 401:
            return RegistryError(f"{what}: {self.host} still asks for authentication",
                                 hint=f"run `ckit login {self.host}`")
        return RegistryError(f"{what}: registry {self.host} answered {status}" + (f" ({detail})" if detail else ""))

    def check_login(self) -> bool:
        """Check the credentials against ``/v2/``; False when the registry asks for none."""
        self.base_url()
        if self.auth.challenge is None:
            return False
        self.request("GET", "/v2/", [], what=f"login to {self.host}")
        return True

    # -- manifests -------------------------------------------------------------------------------------

    def get_manifest(self, repo: str, reference: str, accept: str = ACCEPT_ALL) -> Manifest:
        what = f"manifest {self.host}/{repo}:{reference}"
        response = self.request("GET", f"/v2/{repo}/manifests/{reference}", [scope_for(repo, "pull")],
                                headers={"Accept": accept}, what=what, limit=limits.size("manifest_size"))
        data = response.content  # at most the manifest limit, whatever the server claims or sends
        digest = of_bytes(data)
        if ":" in reference:  # pinned by digest: any algorithm the spec allows, verified before use
            verify_bytes(data, str(parse_digest(reference, what)), what)
            digest = reference
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        if media_type not in MANIFEST_TYPES:
            declared = parse_json(data, what, error=IntegrityError).get("mediaType")
            media_type = declared if isinstance(declared, str) else media_type
        return Manifest(data, media_type, digest)

    def head_manifest(self, repo: str, reference: str, accept: str = ACCEPT_ALL) -> ManifestHead:
        response = self.request("HEAD", f"/v2/{repo}/manifests/{reference}", [scope_for(repo, "pull")],
                                headers={"Accept": accept}, what=f"manifest {self.host}/{repo}:{reference}")
        digest = response.headers.get("Docker-Content-Digest")
        if not digest:
            return self._head_from_get(repo, reference, accept)
        length = response.headers.get("Content-Length") or "0"
        return ManifestHead(str(parse_digest(digest, f"manifest {self.host}/{repo}:{reference}")),
                            response.headers.get("Content-Type", "").split(";")[0].strip(),
                            ascii_int(length) or 0)

    def _head_from_get(self, repo: str, reference: str, accept: str) -> ManifestHead:
        manifest = self.get_manifest(repo, reference, accept)
        return ManifestHead(manifest.digest, manifest.media_type, len(manifest.data))

    def put_manifest(self, repo: str, reference: str, data: bytes, media_type: str) -> str:
        digest = of_bytes(data)
        response = self.request("PUT", f"/v2/{repo}/manifests/{reference}", [scope_for(repo, "pull,push")],
                                ok=(201, 200), headers={"Content-Type": media_type}, body=lambda: data,
                                what=f"push manifest {self.host}/{repo}:{reference}")
        returned = response.headers.get("Docker-Content-Digest", digest)
        if returned != digest:
            raise IntegrityError(f"registry {self.host} stored manifest {repo}:{reference} as {returned}, "
                                 f"expected {digest}")
        return digest

    # -- blobs -----------------------------------------------------------------------------------------

    def blob_exists(self, repo: str, digest: str) -> bool:
        parse_digest(digest, f"blob of {self.host}/{repo}")  # a digest names a URL only once it is valid
        response = self.request("HEAD", f"/v2/{repo}/blobs/{digest}", [scope_for(repo, "pull")], ok=(200, 404))
        return response.status_code == 200

    @contextmanager
    def open_blob(self, repo: str, digest: str, size: int | None = None) -> Iterator[VerifyingReader]:
        """A file-like object over the blob that checks its sha256 (and size) while streaming.

        Reading to the end, or leaving the block normally, raises IntegrityError on a mismatch.
        """
        parse_digest(digest, f"blob of {self.host}/{repo}")
        what = f"blob {digest} of {self.host}/{repo}"
        response = self.request("GET", f"/v2/{repo}/blobs/{digest}", [scope_for(repo, "pull")], stream=True,
                                what=f"blob {self.host}/{repo}@{digest}")
        announced = response.headers.get("Content-Length", "")
        if size is not None and ascii_int(announced) not in (None, size):
            response.close()
            raise IntegrityError(f"{what}: the registry announces {announced} bytes, its descriptor says {size}",
                                 hint="the content is corrupt or was altered; nothing was written")
        reader = VerifyingReader(transport.StreamBody(response, what, size), digest, size, what)
        try:
            yield reader
            reader.drain()
        finally:
            response.close()

    def upload_blob(self, repo: str, source: Path | BinaryIO, digest: str, size: int,
                    progress: Progress | None = None, mount_from: str | None = None) -> int:
        """Upload a blob unless the registry has it; return the bytes sent (0 when skipped or mounted)."""
        if self.blob_exists(repo, digest):
            log.debug("blob %s already in %s/%s", digest, self.host, repo)
            if progress:
                progress(size)
            return 0
        location = self._start_upload(repo, digest, mount_from)
        if location is None:
            if progress:
                progress(size)
            return 0
        owned = isinstance(source, (str, Path))
        stream: BinaryIO = open(source, "rb") if isinstance(source, (str, Path)) else source  # noqa: SIM115 - closed below
        try:
            if size <= self.chunk_size or not stream.seekable():
                sent = self._put_whole(repo, location, stream, digest, size, progress)
            else:
                sent = self._put_chunks(repo, location, stream, digest, size, progress)
        finally:
            if owned:
                stream.close()
        return sent

    def upload_new_file(self, repo: str, path: Path, size: int, progress: Progress | None = None) -> tuple[str, int]:
        """Upload a file whose digest is not known, hashing it as it is sent (chunked); return (digest, bytes sent).

        Without a digest the registry cannot be asked first, so use this only for a file ckit has not seen
        (see :mod:`..transfer.known_digests`); it saves the separate read that hashing first would cost.
        """
        from .chunked import ChunkedUpload

        location = self._start_upload(repo, None, None)
        assert location is not None  # noqa: S101 - only a mount answers 201
        with open(path, "rb") as stream:
            upload = ChunkedUpload(self, repo, location, stream, None, size, progress)
            sent = upload.run()
        return str(upload.digest), sent

    def _start_upload(self, repo: str, digest: str | None, mount_from: str | None) -> str | None:
        scopes = [scope_for(repo, "pull,push")]
        params: dict[str, str] | None = None
        if mount_from and mount_from != repo:
            params = {"from": mount_from} if digest is None else {"mount": digest, "from": mount_from}
            scopes.append(scope_for(mount_from, "pull"))
        response = self.request("POST", f"/v2/{repo}/blobs/uploads/", scopes, ok=(201, 202), params=params,
                                what=f"start upload to {self.host}/{repo}")
        if response.status_code == 201:
            log.debug("blob %s mounted from %s", digest, mount_from)
            return None
        return self.location_of(response)

    def location_of(self, response: requests.Response) -> str:
        location = response.headers.get("Location")
        if not location:
            raise RegistryError(f"registry {self.host} gave no upload location")
        if location.startswith("/"):
            location = self.base_url() + location
        return location

    @staticmethod
    def with_param(location: str, key: str, value: str) -> str:
        return f"{location}{'&' if '?' in location else '?'}{key}={value}"

    def _put_whole(self, repo: str, location: str, stream: BinaryIO, digest: str, size: int,
                   progress: Progress | None) -> int:
        start = stream.tell() if stream.seekable() else 0

        def body() -> LimitedReader:
            if stream.seekable():
                stream.seek(start)
            return LimitedReader(stream, size, progress)

        self.request("PUT", self.with_param(location, "digest", digest), [scope_for(repo, "pull,push")],
                     ok=(201,), body=body, headers={"Content-Type": "application/octet-stream",
                                                    "Content-Length": str(size)},
                     what=f"upload blob {digest} to {self.host}/{repo}")
        return size

    def _put_chunks(self, repo: str, location: str, stream: BinaryIO, digest: str, size: int,
                    progress: Progress | None) -> int:
        from .chunked import ChunkedUpload

        upload = ChunkedUpload(self, repo, location, stream, digest, size, progress)
        return upload.run()
