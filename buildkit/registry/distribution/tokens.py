"""The registry auth handshake: ``WWW-Authenticate`` challenges, Basic, and Bearer tokens cached per scope.

Implements the distribution token protocol: on a 401 the registry names a scheme; for ``Bearer`` it also
names a token ``realm``, a ``service`` and the ``scope`` it wants. ckit fetches a token from the realm
(with Basic credentials when it has them) and caches it per (realm, service, scope) until it expires.

Credentials go to a token realm only over https, or to a loopback realm, or (with ``--insecure``) to a realm on
the registry's own host: a registry cannot send a user's password in clear text to a host of its choosing.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests

from ...config import limits
from ...config.jsondoc import parse as parse_json
from ...errors import RegistryError
from .auth import Credentials
from .challenge import Challenge, parse_challenge, realm_allows_credentials, scope_for

__all__ = ["Authenticator", "Challenge", "parse_challenge", "scope_for"]
from .transport import exchange, no_answer

log = logging.getLogger("ckit.registry")

DEFAULT_TOKEN_LIFETIME = 60  # seconds, as the token spec says when expires_in is missing
EXPIRY_MARGIN = 5.0

def _token_fields(body: bytes, what: str) -> tuple[str, float]:
    """The token and its lifetime from a token server's JSON answer, every field type-checked."""
    try:
        data = parse_json(body, f"the answer of {what}", error=RegistryError)
    except RegistryError as err:
        raise RegistryError(f"{what} returned no token ({err.message})") from None
    value = data.get("token") or data.get("access_token")
    if not isinstance(value, str) or not value or any(c in value for c in "\r\n\0"):
        raise RegistryError(f"{what} returned no token")
    lifetime = data.get("expires_in")
    if not isinstance(lifetime, (int, float)) or isinstance(lifetime, bool) or not 0 < lifetime < 10**9:
        lifetime = DEFAULT_TOKEN_LIFETIME
    return value, float(lifetime)



@dataclass
class _Token:
    value: str
    expires_at: float


class Authenticator:
    """Adds ``Authorization`` headers to requests and answers 401 challenges for one registry host.

    Safe to share between threads (concurrent layer downloads): token fetches are serialised, and whether
    the token a thread just sent was fresh is remembered per thread.
    """

    def __init__(self, host: str, session: requests.Session, credentials: Credentials | None, *,
                 verify: bool | str = True, insecure: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.session = session
        self.credentials = credentials
        self.verify = verify
        self.insecure = insecure
        self.clock = clock
        self.challenge: Challenge | None = None
        self._lock = threading.RLock()
        self._local = threading.local()
        self._tokens: dict[tuple[str, str, tuple[str, ...]], _Token] = {}

    @property
    def _fresh(self) -> bool:
        """The token this thread sent last had just been fetched (so a 401 cannot be an expired cache)."""
        return getattr(self._local, "fresh", False)

    @_fresh.setter
    def _fresh(self, value: bool) -> None:
        self._local.fresh = value

    def secrets(self) -> list[str]:
        found = [t.value for t in list(self._tokens.values())]
        return found + (self.credentials.secrets() if self.credentials else [])

    def _basic_header(self) -> str:
        assert self.credentials is not None
        pair = f"{self.credentials.username}:{self.credentials.password}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    def _key(self, scopes: Sequence[str]) -> tuple[str, str, tuple[str, ...]]:
        assert self.challenge is not None
        params = self.challenge.params
        return params.get("realm", ""), params.get("service", ""), tuple(sorted(scopes))

    def headers(self, scopes: Sequence[str]) -> dict[str, str]:
        """Authorization header for a request needing ``scopes`` (fetching a token when the realm is known)."""
        if self.challenge is None:
            return {}
        if self.challenge.scheme == "basic":
            return {"Authorization": self._basic_header()} if self.credentials else {}
        if self.challenge.scheme == "bearer":
            with self._lock:
                token = self._tokens.get(self._key(scopes))
                self._fresh = token is None or token.expires_at <= self.clock()
                if token is None or self._fresh:
                    token = self._fetch_token(scopes)
            return {"Authorization": f"Bearer {token.value}"}
        return {}

    def learn(self, response: requests.Response) -> None:
        """Remember the scheme and realm a 401 names, so later requests authenticate up front."""
        challenge = parse_challenge(response.headers.get("WWW-Authenticate", ""))
        if challenge is not None and challenge.scheme in ("basic", "bearer"):
            self.challenge = Challenge(challenge.scheme, {k: v for k, v in challenge.params.items()
                                                          if k in ("realm", "service")})

    def on_unauthorized(self, response: requests.Response, scopes: Sequence[str], sent_auth: bool) -> None:
        """Learn from a 401; raise RegistryError when retrying cannot help."""
        with self._lock:
            self._answer(response, scopes, sent_auth)

    def _answer(self, response: requests.Response, scopes: Sequence[str], sent_auth: bool) -> None:
        challenge = parse_challenge(response.headers.get("WWW-Authenticate", ""))
        if challenge is None or challenge.scheme not in ("basic", "bearer"):
            raise RegistryError(f"registry {self.host} refused the request (401) without a usable "
                                f"authentication challenge")
        if challenge.scheme == "basic":
            if not self.credentials:
                raise self._needs_login()
            if sent_auth:
                raise self._rejected()
        elif sent_auth and self.challenge is not None and self.challenge.scheme == "bearer":
            key = self._key(scopes)
            self._tokens.pop(key, None)
            if self._fresh and not self.credentials:
                raise self._needs_login()
            if self._fresh:
                error = challenge.params.get("error", "unauthorized")
                raise RegistryError(
                    f"registry {self.host} rejected the access token from {key[0]} ({error}: the token is "
                    f"expired, invalid or lacks the scope {' '.join(scopes)})",
                    hint="check that the token server and the registry agree on the signing key, service name "
                         "and clock, and that the account may access this repository")
            log.debug("cached token for %s rejected; fetching a new one", " ".join(scopes))
        self.learn(response)

    def _check_realm(self, realm: str) -> None:
        """Refuse to send credentials to a realm in clear text on another host."""
        if realm_allows_credentials(realm, self.host, self.insecure):
            return
        parts = urlsplit(realm)
        netloc = parts.netloc.rpartition("@")[2]
        raise RegistryError(f"registry {self.host} names the token server {parts.scheme}://{netloc}, which is "
                            "neither https nor this registry's host: ckit does not send credentials there",
                            hint="the registry's auth realm must use https; check its configuration")

    def _needs_login(self) -> RegistryError:
        return RegistryError(f"registry {self.host} requires authentication",
                             hint=f"run `ckit login {self.host}` or set CKIT_REGISTRY_USER and "
                                  f"CKIT_REGISTRY_PASSWORD")

    def _rejected(self) -> RegistryError:
        assert self.credentials is not None
        return RegistryError(f"registry {self.host} rejected the credentials of user "
                             f"{self.credentials.username!r} (from {self.credentials.source or 'options'})",
                             hint=f"check the user name and password, then run `ckit login {self.host}`")

    def _fetch_token(self, scopes: Sequence[str]) -> _Token:
        assert self.challenge is not None
        realm = self.challenge.params.get("realm")
        if not realm:
            raise RegistryError(f"registry {self.host} asked for a bearer token but named no realm")
        params: list[tuple[str, str]] = []
        if self.challenge.params.get("service"):
            params.append(("service", self.challenge.params["service"]))
        params += [("scope", s) for s in scopes]
        if self.credentials:
            self._check_realm(realm)
        auth = None
        if self.credentials and not self.credentials.is_identity_token:
            auth = (self.credentials.username, self.credentials.password)
        what = f"token server {realm} of registry {self.host}"
        try:  # under the transport policy: a deadline, retries, the answer read size-capped
            if self.credentials and self.credentials.is_identity_token:
                data = {"grant_type": "refresh_token", "refresh_token": self.credentials.password,
                        "client_id": "ckit", "scope": " ".join(scopes)}  # OAuth2 form: one space-separated scope
                if self.challenge.params.get("service"):
                    data["service"] = self.challenge.params["service"]
                response = exchange(self.session, "POST", realm, what=what, limit=limits.size("response_size"),
                                    body=lambda: data, verify=self.verify)
            else:
                response = exchange(self.session, "GET", realm, what=what, limit=limits.size("response_size"),
                                    params=params, auth=auth, verify=self.verify)
        except requests.RequestException as err:
            raise RegistryError(f"cannot reach the token server {realm} of registry {self.host}: "
                                f"{err.__class__.__name__}", unreachable=no_answer(err)) from err
        if response.status_code in (401, 403):
            if not self.credentials:
                raise self._needs_login()
            raise RegistryError(f"token server {realm} rejected the credentials of user "
                                f"{self.credentials.username!r} for {self.host} ({response.status_code})",
                                hint=f"check the user name and password, then run `ckit login {self.host}`")
        if response.status_code != 200:
            raise RegistryError(f"token server {realm} answered {response.status_code} for {self.host}")
        value, lifetime = _token_fields(response.content, f"token server {realm} for {self.host}")
        token = _Token(value, self.clock() + max(lifetime - EXPIRY_MARGIN, 0.0))
        self._tokens[self._key(scopes)] = token
        log.debug("token for %s from %s (%.0f s)", " ".join(scopes), realm, lifetime)
        return token
