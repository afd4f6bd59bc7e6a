"""Debian's ``docker-registry`` (distribution 2.8) on 127.0.0.1: plain, htpasswd (Basic) and TLS with a test CA.

Each instance has its own config and storage under RUN/registry/NAME; the packaged config (all interfaces)
is never used.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .daemon import Component, adopt, run, spawn, stop_pid, wait_ready

USERNAME = "ckituser"
PASSWORD = "ckitpass"  # noqa: S105 - a throwaway credential of the local test registry
REALM = "ckit-test-realm"


@dataclass(frozen=True)
class RegistryInfo:
    """What a test needs to talk to one registry."""

    host: str  # "127.0.0.1:5000": the part of an image reference before the repository
    scheme: str  # "http" or "https"
    data_dir: Path  # the registry's storage root (to inspect or tamper with blobs)
    username: str | None = None
    password: str | None = None
    ca_file: Path | None = None
    cert_dir: Path | None = None  # holds only ca.crt: `podman push --cert-dir`, `skopeo --dest-cert-dir`

    @property
    def url(self) -> str:
        return self.host

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.host}"

    @property
    def auth_config(self) -> dict[str, str] | None:
        """For the docker SDK: ``client.images.push(repo, tag, auth_config=...)``."""
        if self.username is None or self.password is None:
            return None
        return {"username": self.username, "password": self.password}


class Registry(Component):
    """One registry instance; subclasses pick port and auth. ``extra`` merges into its YAML config."""

    name = "registry"
    port = 5000
    scheme = "http"

    @property
    def home(self) -> Path:
        return self.run / "registry" / self.name

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pidfile(self) -> Path:
        return self.home / "registry.pid"

    @property
    def log(self) -> Path:
        return self.home / "registry.log"

    def info(self) -> RegistryInfo:
        return RegistryInfo(self.host, self.scheme, self.home / "data")

    def config(self) -> dict[str, object]:
        return {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {
                "filesystem": {"rootdirectory": str(self.home / "data")},
                "delete": {"enabled": True},
            },
            "http": {"addr": self.host, "secret": "ckit-ci-not-secret"},
        }

    def prepare(self) -> None:
        """Write what the config refers to (htpasswd, certificates)."""

    def ssl_context(self) -> ssl.SSLContext | None:
        return None

    def answers(self) -> bool:
        """``/v2/`` answers 200, or 401 when auth is on."""
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if self.ssl_context() is not None:
            handlers.append(urllib.request.HTTPSHandler(context=self.ssl_context()))
        try:
            with urllib.request.build_opener(*handlers).open(
                f"{self.scheme}://{self.host}/v2/", timeout=5
            ) as resp:
                return resp.status == 200
        except urllib.error.HTTPError as err:
            return err.code == 401
        except OSError:
            return False

    @property
    def config_file(self) -> Path:
        return self.home / "config.yml"

    def running(self) -> bool:
        return adopt(self.pidfile, "docker-registry", str(self.config_file)) is not None

    def healthy(self) -> bool:
        return self.running() and self.answers()

    def _start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "data").mkdir(exist_ok=True)
        self.prepare()
        conf = self.config_file
        conf.write_text(to_yaml(self.config()))
        # REGISTRY_* variables override the config (REGISTRY_AUTH_FILE, set for podman, would break it)
        argv = ["docker-registry", "serve", str(conf)]
        pid = spawn(argv, log=self.log, pidfile=self.pidfile, drop_env_prefix="REGISTRY_")
        wait_ready(
            f"docker-registry {self.name} on {self.host}", self.answers, log=self.log, pid=pid, timeout=20
        )

    def _stop(self) -> None:
        stop_pid(
            adopt(self.pidfile, "docker-registry", str(self.config_file)), what=f"docker-registry {self.name}"
        )
        self.pidfile.unlink(missing_ok=True)


class AuthRegistry(Registry):
    """htpasswd (bcrypt) Basic auth: ckituser / ckitpass on 127.0.0.1:5001."""

    name = "registry-auth"
    port = 5001

    def info(self) -> RegistryInfo:
        return RegistryInfo(self.host, self.scheme, self.home / "data", USERNAME, PASSWORD)

    def config(self) -> dict[str, object]:
        return {
            **super().config(),
            "auth": {"htpasswd": {"realm": REALM, "path": str(self.home / "htpasswd")}},
        }

    def prepare(self) -> None:
        line = run(["htpasswd", "-Bbn", USERNAME, PASSWORD]).stdout.decode().strip()
        (self.home / "htpasswd").write_text(line + "\n")


class TLSRegistry(Registry):
    """https on 127.0.0.1:5002 with a certificate (SAN 127.0.0.1, localhost) from a test CA in RUN/registry/ca."""

    name = "registry-tls"
    port = 5002
    scheme = "https"

    @property
    def ca_dir(self) -> Path:
        return self.run / "registry" / "ca"

    @property
    def ca_file(self) -> Path:
        return self.ca_dir / "ca.crt"

    def info(self) -> RegistryInfo:
        return RegistryInfo(
            self.host, self.scheme, self.home / "data", ca_file=self.ca_file, cert_dir=self.cert_dir
        )

    @property
    def cert_dir(self) -> Path:
        return self.run / "registry" / "trust"

    def config(self) -> dict[str, object]:
        conf = super().config()
        conf["http"] = {
            **conf["http"],  # type: ignore[dict-item]
            "tls": {"certificate": str(self.ca_dir / "server.crt"), "key": str(self.ca_dir / "server.key")},
        }
        return conf

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file.is_file() else None

    def prepare(self) -> None:
        make_test_ca(self.ca_dir)
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        (self.cert_dir / "ca.crt").write_bytes(self.ca_file.read_bytes())


def make_test_ca(ca_dir: Path) -> None:
    """A CA plus a server certificate for 127.0.0.1 and localhost (kept when already there)."""
    if (ca_dir / "server.crt").is_file() and (ca_dir / "ca.crt").is_file():
        return
    ca_dir.mkdir(parents=True, exist_ok=True)
    d = str(ca_dir)
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-sha256", "-days", "3650",
         "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.crt", "-subj", "/CN=ckit test CA",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
         "-addext", "subjectKeyIdentifier=hash"])  # fmt: skip
    run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-sha256", "-keyout", f"{d}/server.key",
         "-out", f"{d}/server.csr", "-subj", "/CN=127.0.0.1"])  # fmt: skip
    (ca_dir / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    run(["openssl", "x509", "-req", "-sha256", "-days", "825", "-in", f"{d}/server.csr", "-CA", f"{d}/ca.crt",
         "-CAkey", f"{d}/ca.key", "-CAcreateserial", "-out", f"{d}/server.crt", "-extfile", f"{d}/server.ext"])  # fmt: skip


def to_yaml(data: dict[str, object], indent: str = "") -> str:
    """Block YAML for nested dicts of scalars; strings JSON-quoted (valid YAML), so paths need no escaping."""
    out = []
    for key, value in data.items():
        if isinstance(value, dict):
            out.append(f"{indent}{key}:\n{to_yaml(value, indent + '  ')}")
        else:
            out.append(f"{indent}{key}: {json.dumps(value)}\n")
    return "".join(out)
