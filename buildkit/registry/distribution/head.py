"""A manifest HEAD in a few milliseconds: the common case of :meth:`.client.RegistryClient.head_manifest` over
``http.client``, for callers whose start-up time counts (the Pyxis importer serving a cached image runs once per
node and job step: loading ``requests`` would be most of its time).

It answers only the plain cases: 200 with a ``Docker-Content-Digest``, after at most one Basic or Bearer challenge
(a token fetched with the same rules as :mod:`.tokens`: credentials only to the registry itself or to a realm that
:func:`.challenge.realm_allows_credentials`). Anything else (a refusal, a redirect, an identity token, a connection
or TLS problem) returns None, and the caller asks :class:`~.client.RegistryClient`, which handles every case and
words every error. A registry that cannot be reached at all is a RegistryError caused by the OSError, as the full
client's is by its connection error (the importer then serves from its cache).
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from ...errors import CkitError, RegistryError
from ...oci.digest import parse_digest
from .auth import Credentials
from .challenge import parse_challenge, realm_allows_credentials, scope_for
from .reference import is_loopback

ACCEPT = ", ".join(("application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json",
                    "application/vnd.docker.distribution.manifest.v2+json",
                    "application/vnd.docker.distribution.manifest.list.v2+json"))  # as client.ACCEPT_ALL
TIMEOUT = 20
MAX_TOKEN_REPLY = 1 << 20


def _context(insecure: bool, ca_file: Path | None) -> ssl.SSLContext:
    if insecure:  # nothing is verified, so the system's CA certificates are not loaded (20 ms of start-up)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=str(ca_file) if ca_file else None)


def _open(scheme: str, netloc: str, insecure: bool, ca_file: Path | None) -> http.client.HTTPConnection:
    if scheme == "https":
        return http.client.HTTPSConnection(netloc, timeout=TIMEOUT, context=_context(insecure, ca_file))
    return http.client.HTTPConnection(netloc, timeout=TIMEOUT)


def _send(conn: http.client.HTTPConnection, method: str, path: str,
          headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    conn.request(method, path, headers={"User-Agent": "ckit", **headers})
    response = conn.getresponse()
    body = response.read(MAX_TOKEN_REPLY) if method == "GET" else response.read()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


def _token(realm: str, params: dict[str, str], scope: str, credentials: Credentials | None, host: str,
           insecure: bool, ca_file: Path | None) -> str | None:
    if credentials is not None and (credentials.is_identity_token or
                                    not realm_allows_credentials(realm, host, insecure)):
        return None  # refresh tokens and doubtful realms: the full client decides
    parts = urlsplit(realm)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    query = urlencode([*(("service", params["service"]),) * ("service" in params), ("scope", scope)])
    path = (parts.path or "/") + "?" + (f"{parts.query}&{query}" if parts.query else query)
    headers = {}
    if credentials is not None:
        pair = f"{credentials.username}:{credentials.password}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    conn = _open(parts.scheme, parts.netloc, insecure, ca_file)
    try:
        status, _, body = _send(conn, "GET", path, headers)
    finally:
        conn.close()
    if status != 200:
        return None
    data = json.loads(body)
    value = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None


def head_digest(host: str, repository: str, reference: str, credentials: Credentials | None, *,
                insecure: bool = False, ca_file: Path | None = None) -> str | None:
    """The manifest digest of ``repository:reference`` on ``host`` (an API host), or None: ask RegistryClient."""
    path = f"/v2/{repository}/manifests/{reference}"
    schemes = ("https", "http") if (insecure or is_loopback(host)) and ca_file is None else ("https",)
    for scheme in schemes:
        try:
            return _head(scheme, host, path, repository, credentials, insecure, ca_file)
        except ssl.SSLError:
            continue  # a plain-http registry where that is allowed; else the full client words the TLS error
        except (ConnectionRefusedError, TimeoutError, socket.gaierror) as err:
            why = {ConnectionRefusedError: "connection refused", TimeoutError: "timed out"}.get(type(err),
                                                                                              "unknown host")
            raise RegistryError(f"cannot reach registry {host} ({scheme}://{host}/v2/): {why}",
                                hint="check the registry address and port, and that it is running",
                                unreachable=True) from err
        except (OSError, http.client.HTTPException, ValueError, CkitError):
            return None
    return None


def _head(scheme: str, host: str, path: str, repository: str, credentials: Credentials | None, insecure: bool,
          ca_file: Path | None) -> str | None:
    conn = _open(scheme, host, insecure, ca_file)
    try:
        status, headers, _ = _send(conn, "HEAD", path, {"Accept": ACCEPT})
        if status == 401:
            challenge = parse_challenge(headers.get("www-authenticate", ""))
            auth = None
            if challenge is not None and challenge.scheme == "basic" and credentials is not None:
                pair = f"{credentials.username}:{credentials.password}".encode()
                auth = "Basic " + base64.b64encode(pair).decode()
            elif challenge is not None and challenge.scheme == "bearer" and challenge.params.get("realm"):
                token = _token(challenge.params["realm"], challenge.params, scope_for(repository, "pull"),
                               credentials, host, insecure, ca_file)
                auth = f"Bearer {token}" if token else None
            if auth is None:
                return None
            status, headers, _ = _send(conn, "HEAD", path, {"Accept": ACCEPT, "Authorization": auth})
    finally:
        conn.close()
    digest = headers.get("docker-content-digest", "")
    if status != 200 or not digest:
        return None
    return str(parse_digest(digest, f"manifest digest from {host}"))
