"""A small token server for registry tests, following the distribution token spec.

It signs JWTs (ES256) with a throwaway key whose self-signed certificate is the registry's
``rootcertbundle``; the token header carries the certificate (``x5c``). Clients authenticate with Basic
credentials; every requested repository scope is granted to the one test user. ``expired`` makes it issue
tokens that are already past their ``exp`` (beyond distribution's 60 s leeway), to test rejection.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.infra.daemon import run_dir
from tests.infra.registry import Registry

ISSUER = "ckit-test-issuer"
SERVICE = "ckit-test-registry"


def make_signing_cert(folder: Path) -> tuple[ec.EllipticCurvePrivateKey, bytes, Path]:
    """A P-256 key and its self-signed certificate (DER); the PEM is written to ``folder/token-ca.pem``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ckit test token signer")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    bundle = folder / "token-ca.pem"
    bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert.public_bytes(serialization.Encoding.DER), bundle


@dataclass
class TokenServer:
    folder: Path
    username: str
    password: str
    port: int = 0
    lifetime: int = 300  # the JWT's real exp
    expires_in: int = 300  # what the response tells the client
    expired: bool = False
    issued: list[str] = field(default_factory=list)
    requests: list[dict[str, list[str]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.key, self.cert_der, self.bundle = make_signing_cert(self.folder)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                query = parse_qs(urlparse(self.path).query)
                server.requests.append(query)
                if not server.authorised(self.headers.get("Authorization", "")):
                    self.send_response(401)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"details":"invalid username or password"}')
                    return
                token = server.sign(query.get("service", [""])[0], query.get("scope", []))
                body = json.dumps({"token": token, "access_token": token, "expires_in": server.expires_in,
                                   "issued_at": dt.datetime.now(dt.UTC).isoformat()}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def authorised(self, header: str) -> bool:
        if not header.startswith("Basic "):
            return False
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        return (user, password) == (self.username, self.password)

    def sign(self, service: str, scopes: list[str]) -> str:
        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": [a for a in actions.split(",") if a]})
        now = int(time.time())
        exp = now - 600 if self.expired else now + self.lifetime
        claims = {"iss": ISSUER, "sub": self.username, "aud": service, "exp": exp, "nbf": now - 700,
                  "iat": now - 700, "jti": uuid.uuid4().hex, "access": access}
        headers = {"x5c": [base64.b64encode(self.cert_der).decode()]}
        token = jwt.encode(claims, self.key, algorithm="ES256", headers=headers)
        self.issued.append(token)
        return token

    def registry_auth(self) -> dict[str, object]:
        """The ``auth:`` section of the registry config that trusts this server."""
        return {"token": {"realm": self.realm, "service": SERVICE, "issuer": ISSUER,
                          "rootcertbundle": str(self.bundle)}}

    def start(self) -> TokenServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class TokenRegistry(Registry):
    """distribution with ``auth: token`` on a free 127.0.0.1 port, trusting the test token server's certificate.

    Name and port are this process's own, so parallel test workers each run their own pair.
    """

    def __init__(self, server: TokenServer) -> None:
        super().__init__(run_dir())
        self.server = server
        self.port = _free_port()
        self.name = f"registry-token-{os.getpid()}-{self.port}"

    def config(self) -> dict[str, object]:
        return {**super().config(), "auth": self.server.registry_auth()}

    def healthy(self) -> bool:  # always start our own: the token server's key is new each session
        return False
