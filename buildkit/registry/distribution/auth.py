"""Registry credentials, found and stored the way docker does.

Lookup order for a registry host:

1. ``CKIT_REGISTRY_USER`` + ``CKIT_REGISTRY_PASSWORD`` (CI), limited to ``CKIT_REGISTRY_HOST`` when that is set;
2. docker's config file (``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``): ``credHelpers[host]``,
   then ``auths[host].auth`` (base64 ``user:password``) or ``identitytoken``, then the ``credsStore`` helper.

Helpers (``docker-credential-NAME get|store|erase``) receive the secret on stdin, never in argv.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...config import limits
from ...config.jsondoc import parse as parse_json
from ...errors import ConfigError, RegistryError
from ...fs.files import atomic_path, read_capped
from .reference import DOCKER_HUB

ENV_USER = "CKIT_REGISTRY_USER"
ENV_PASSWORD = "CKIT_REGISTRY_PASSWORD"  # noqa: S105 - the variable's name, not a secret
ENV_HOST = "CKIT_REGISTRY_HOST"
DOCKER_HUB_KEY = "https://index.docker.io/v1/"
TOKEN_USER = "<token>"  # noqa: S105 - docker's marker for identity tokens


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str = ""

    @property
    def is_identity_token(self) -> bool:
        return self.username == TOKEN_USER

    def secrets(self) -> list[str]:
        return [self.password, base64.b64encode(f"{self.username}:{self.password}".encode()).decode()]


def docker_config_path() -> Path:
    base = os.environ.get("DOCKER_CONFIG")
    return Path(base) / "config.json" if base else Path.home() / ".docker" / "config.json"


def _config_keys(host: str) -> list[str]:
    if host == DOCKER_HUB:
        return [DOCKER_HUB_KEY, "index.docker.io", DOCKER_HUB, "registry-1.docker.io"]
    return [host, f"https://{host}", f"http://{host}", f"https://{host}/v2/", f"https://{host}/v1/"]


def load_docker_config(path: Path | None = None) -> dict:
    path = path or docker_config_path()
    if not path.is_file():
        return {}
    try:  # a regular file of at most the file limit, depth-checked JSON (a link to /dev/zero is refused)
        data = parse_json(read_capped(path, limits.size("file_size"), "docker config"), str(path))
    except (OSError, ConfigError) as err:
        raise ConfigError(f"{path}: not a readable docker config file ({err})",
                          hint="fix or remove the file, then run ckit login again") from err
    return data


def from_env(host: str) -> Credentials | None:
    user, password = os.environ.get(ENV_USER), os.environ.get(ENV_PASSWORD)
    only = os.environ.get(ENV_HOST)
    if user and password and (not only or only == host):
        return Credentials(user, password, source="environment")
    return None


def _mapping(config: dict, key: str, path: Path) -> dict:
    value = config.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {key} must be a JSON object", hint="fix the file, or run ckit login again")
    return value


def _decode_auth(value: str, path: Path, key: str) -> Credentials:
    try:
        user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        sep = ""
    if not sep:
        raise ConfigError(f"{path}: auths[{key!r}].auth is not base64 'user:password'",
                          hint=f"run ckit login {key} again")
    return Credentials(user, password, source=str(path))


def resolve(host: str, config_path: Path | None = None) -> Credentials | None:
    """Credentials for ``host`` or None (anonymous)."""
    found = from_env(host)
    if found:
        return found
    path = config_path or docker_config_path()
    config = load_docker_config(path)
    keys = _config_keys(host)
    helpers = _mapping(config, "credHelpers", path)
    for key in keys:
        if isinstance(helpers.get(key), str):
            return helper_get(helpers[key], key)
    auths = _mapping(config, "auths", path)
    for key in keys:
        entry = auths.get(key)
        if not isinstance(entry, dict):
            continue
        entry = {k: v for k, v in entry.items() if isinstance(v, str)}  # other types are not credentials
        if entry.get("identitytoken"):
            return Credentials(TOKEN_USER, entry["identitytoken"], source=str(path))
        if entry.get("auth"):
            return _decode_auth(entry["auth"], path, key)
        if entry.get("username") and entry.get("password"):
            return Credentials(entry["username"], entry["password"], source=str(path))
    store = config.get("credsStore")
    if isinstance(store, str) and store:
        return helper_get(store, keys[0])
    return None


def _run_helper(helper: str, action: str, payload: str, **kwargs: Any) -> Any:
    """``docker-credential-HELPER ACTION`` with ``payload`` on its stdin (a process.run result)."""
    from ... import process  # only credential helpers run programs: the importer's start-up skips loading it

    name = f"docker-credential-{helper}"
    process.require(name, purpose=f"read registry credentials (credsStore/credHelpers {helper!r})")
    return process.run([name, action], input=payload, step="credential helper", **kwargs)


def helper_get(helper: str, server: str) -> Credentials | None:
    result = _run_helper(helper, "get", server, check=False)
    if result.returncode != 0:
        if "credentials not found" in (result.stdout + result.stderr).lower():
            return None
        raise RegistryError(f"credential helper docker-credential-{helper} failed for {server} "
                            f"(exit code {result.returncode})", hint="check the helper, or run ckit login again")
    try:
        data = json.loads(result.stdout)
        return Credentials(data["Username"], data["Secret"], source=f"docker-credential-{helper}")
    except (ValueError, KeyError, TypeError) as err:
        raise RegistryError(f"credential helper docker-credential-{helper} returned no usable credentials") from err


def _helper_store(helper: str, server: str, creds: Credentials) -> None:
    payload = json.dumps({"ServerURL": server, "Username": creds.username, "Secret": creds.password})
    _run_helper(helper, "store", payload, secrets=creds.secrets())


def _write_private(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with atomic_path(path, mode=0o600) as tmp:  # the temp file is 0600 from its creation
        tmp.write_text(json.dumps(data, indent="\t") + "\n", encoding="utf-8")


def store(host: str, creds: Credentials, config_path: Path | None = None) -> str:
    """Save credentials like ``docker login``; return where they went (file path or helper name)."""
    path = config_path or docker_config_path()
    config = load_docker_config(path)
    key = DOCKER_HUB_KEY if host == DOCKER_HUB else host
    helper = (config.get("credHelpers") or {}).get(key) or config.get("credsStore")
    if helper:
        _helper_store(helper, key, creds)
        config.setdefault("auths", {})[key] = {}
        _write_private(path, config)
        return f"docker-credential-{helper}"
    auth = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
    config.setdefault("auths", {})[key] = {"auth": auth}
    _write_private(path, config)
    return str(path)



def _helper_erase(helper: str, server: str) -> bool:
    """Ask the helper to forget ``server``; False when it had nothing stored."""
    result = _run_helper(helper, "erase", server, check=False)
    if result.returncode == 0:
        return True
    if "credentials not found" in (result.stdout + result.stderr).lower():
        return False
    raise RegistryError(f"credential helper docker-credential-{helper} could not erase {server} "
                        f"(exit code {result.returncode})", hint="check the helper")


def erase(host: str, config_path: Path | None = None) -> list[str]:
    """Forget the stored credentials of ``host`` like ``docker logout``; return where they were removed from
    (the config file, a helper), empty when none were stored. Environment credentials are not touched."""
    path = config_path or docker_config_path()
    config = load_docker_config(path)
    keys = _config_keys(host)
    removed: list[str] = []
    helper = next((config["credHelpers"][k] for k in keys if k in (config.get("credHelpers") or {})), None) \
        or config.get("credsStore")
    if helper and _helper_erase(helper, keys[0]):
        removed.append(f"docker-credential-{helper}")
    auths = config.get("auths") or {}
    found = [key for key in keys if key in auths]
    if found:
        for key in found:
            del auths[key]
        _write_private(path, config)
        removed.append(str(path))
    return removed
