"""The parts of the registry auth handshake that need no HTTP library: ``WWW-Authenticate`` challenges, token
scopes, and where credentials may be sent. :mod:`.tokens` (requests) and :mod:`.head` (http.client) share them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from .reference import is_loopback

_PARAM_RE = re.compile(r'\s*([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*(?:,|$)')


@dataclass(frozen=True)
class Challenge:
    scheme: str  # lower case: "basic" or "bearer"
    params: dict[str, str]


def parse_challenge(header: str) -> Challenge | None:
    """Parse one ``WWW-Authenticate`` value (the first challenge when several are given)."""
    header = header.strip()
    if not header:
        return None
    scheme, _, rest = header.partition(" ")
    params: dict[str, str] = {}
    pos = 0
    rest = rest.strip()
    while pos < len(rest):
        match = _PARAM_RE.match(rest, pos)
        if not match:
            break
        quoted, bare = match.group(2), match.group(3)
        params[match.group(1).lower()] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        pos = match.end()
    return Challenge(scheme.lower(), params)


def scope_for(repository: str, actions: str) -> str:
    return f"repository:{repository}:{actions}"


def realm_allows_credentials(realm: str, host: str, insecure: bool) -> bool:
    """Credentials go to a token realm only over https, or to a loopback realm, or (with ``insecure``) to a realm
    on the registry's own host: a registry cannot have a password sent in clear text to a host of its choosing."""
    parts = urlsplit(realm)
    netloc = parts.netloc.rpartition("@")[2]
    same_host = (parts.hostname or "").lower() == (urlsplit(f"//{host}").hostname or "").lower()
    return parts.scheme == "https" or is_loopback(netloc) or (insecure and same_host)
