"""One HTTP policy for every exchange with a registry or a token server: deadlines, bounded bodies, retries.

* **Deadline.** A request, with the whole of a small answer (headers, manifest, token, error), completes within
  ``CKIT_HTTP_TIMEOUT`` seconds (plus the time an upload body needs at ``CKIT_HTTP_MIN_SPEED``). A watchdog
  shuts the connection's socket down when the deadline passes, so a server that drips one byte at a time, or
  never ends its headers, cannot hold ckit: a per-read timeout alone would never fire on such a server.
* **Bounded bodies.** An answer read into memory stops at a size limit whatever ``Content-Length`` says;
  a streamed blob (:class:`StreamBody`) must keep ``CKIT_HTTP_MIN_SPEED`` bytes/s over every
  ``CKIT_HTTP_TIMEOUT``-second window and is cut off when it sends more than its descriptor says.
* **Retries.** 429, 500, 502, 503, 504 and a broken connection are retried ``CKIT_HTTP_RETRIES`` times for
  GET and HEAD; other methods only after 429 or 503 (the server did not act on them), with a body that can be
  sent again. The wait honours ``Retry-After`` (seconds or a date), capped at ``CKIT_HTTP_RETRY_WAIT``; without
  it the wait doubles from half a second.
"""

from __future__ import annotations

import email.utils
import logging
import random
import socket
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import requests
import urllib3
import urllib3.connection
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from ...config import limits
from ...errors import IntegrityError, RegistryError
from ...outside import ascii_int

log = logging.getLogger("ckit.registry")

READ_SIZE = 1 << 20
RETRY_ANY_METHOD = frozenset((429, 503))
RETRY_IDEMPOTENT = frozenset((429, 500, 502, 503, 504))
IDEMPOTENT = frozenset(("GET", "HEAD", "OPTIONS"))


@dataclass(frozen=True)
class Policy:
    timeout: float
    min_speed: int
    retries: int
    retry_wait: float

    @classmethod
    def current(cls) -> Policy:
        return cls(limits.get("http_timeout"), limits.size("http_min_speed"), limits.size("http_retries"),
                   limits.get("http_retry_wait"))


# --- the watchdog: shut a request's socket down at its deadline -----------------------------------------------
_active = threading.local()


class _Watched:
    """Connections that tell the current thread's watchdog which socket its request uses (``http.client`` drops
    ``sock`` from the connection once an answer that closes it has begun, so it is kept at ``getresponse``)."""

    def _watch(self) -> None:
        dog = getattr(_active, "dog", None)
        if dog is not None:
            dog.conn, dog.sock = self, getattr(self, "sock", None) or dog.sock

    def request(self, *args: Any, **kwargs: Any) -> Any:
        self._watch()
        return super().request(*args, **kwargs)  # type: ignore[misc]

    def getresponse(self, *args: Any, **kwargs: Any) -> Any:
        self._watch()
        return super().getresponse(*args, **kwargs)  # type: ignore[misc]


class _HTTPConnection(_Watched, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConnection(_Watched, urllib3.connection.HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class _Adapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        manager.pool_classes_by_scheme = _POOLS
        return manager


def session() -> requests.Session:
    """A session whose every request can be held to a deadline (see :class:`Watchdog`)."""
    s = requests.Session()
    for prefix in ("http://", "https://"):
        s.mount(prefix, _Adapter())
    s.headers["User-Agent"] = "ckit"
    return s


class Watchdog:
    """Within the block, this thread's request must be done in ``seconds``; then its socket is shut down."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.conn: Any = None
        self.sock: Any = None
        self.fired = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        sock = getattr(self.conn, "sock", None) or self.sock
        if sock is not None:
            with suppress(OSError):  # the plain socket's shutdown wakes the reader without touching TLS state
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def __enter__(self) -> Watchdog:
        _active.dog = self
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        _active.dog = None


# --- one exchange ------------------------------------------------------------------------------------------------
def _retry_after(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    seconds = ascii_int(value)  # isdigit() takes '²' (the headers are Latin-1), which int() refuses
    if seconds is not None:
        return float(seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time()) if when is not None else None


class _BrokenBody(requests.exceptions.ConnectionError):
    """The connection broke while an answer's body was being read."""


def _transient(err: requests.RequestException) -> bool:
    """A connection that broke or stalled (worth a retry), not one refused, unresolved or failing TLS."""
    if isinstance(err, (requests.exceptions.SSLError, requests.exceptions.ConnectTimeout)):
        return False
    if isinstance(err, (requests.exceptions.ReadTimeout, requests.exceptions.ChunkedEncodingError, _BrokenBody)):
        return True
    reason = err.args[0] if err.args else None
    reason = getattr(reason, "reason", reason)
    return isinstance(err, requests.ConnectionError) and isinstance(reason, urllib3.exceptions.ProtocolError)


def _wait(attempt: int, policy: Policy, response: requests.Response | None) -> float:
    asked = _retry_after(response) if response is not None else None
    wait = asked if asked is not None else 0.5 * 2 ** attempt * random.uniform(0.75, 1.0)  # noqa: S311
    return min(wait, policy.retry_wait)


def exchange(s: requests.Session, method: str, url: str, *, what: str, limit: int, stream: bool = False,
             body: Callable[[], Any] | None = None, upload_size: int = 0, policy: Policy | None = None,
             **kwargs: Any) -> requests.Response:
    """``method url`` under the policy. The answer's body is read (at most ``limit`` bytes) unless ``stream``
    is set and the status is 2xx; requests exceptions other than the policy's own are the caller's to word."""
    policy = policy or Policy.current()
    deadline = policy.timeout + upload_size / policy.min_speed
    for attempt in range(policy.retries + 1):
        can_retry = attempt < policy.retries and (body is None or callable(body))
        try:
            with Watchdog(deadline) as dog:
                response = _send(s, method, url, what, limit, stream, body, policy, dog, **kwargs)
        except requests.RequestException as err:
            if dog.fired:
                raise _late(what, deadline) from err
            if not (can_retry and method in IDEMPOTENT and _transient(err)):
                if isinstance(err, _BrokenBody):
                    raise RegistryError(f"{what}: the answer broke off ({err})", unreachable=True) from err
                raise
            cause = err if isinstance(err, _BrokenBody) else err.__class__.__name__
            _sleep(_wait(attempt, policy, None), what, f"the connection broke ({cause})", attempt, policy)
            continue
        status = response.status_code
        if can_retry and (status in RETRY_ANY_METHOD or (method in IDEMPOTENT and status in RETRY_IDEMPOTENT)):
            response.close()
            _sleep(_wait(attempt, policy, response), what, f"the server answered {status}", attempt, policy)
            continue
        return response
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _send(s: requests.Session, method: str, url: str, what: str, limit: int, stream: bool,
          body: Callable[[], Any] | None, policy: Policy, dog: Watchdog, **kwargs: Any) -> requests.Response:
    response = s.request(method, url, data=body() if body else None, stream=True,
                         timeout=(policy.timeout, policy.timeout), **kwargs)
    if stream and response.ok:
        return response
    try:
        response._content = _read_all(response, limit, what)  # noqa: SLF001 - requests' own cache of the body
        response._content_consumed = True  # type: ignore[attr-defined]  # noqa: SLF001
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as err:
        response.close()
        if dog.fired:
            raise _late(what, dog.seconds) from err
        raise _BrokenBody(err.__class__.__name__) from err
    except BaseException:
        response.close()
        raise
    response.raw.release_conn()
    return response


def _read_all(response: requests.Response, limit: int, what: str) -> bytes:
    parts, total = [], 0
    while data := response.raw.read1(min(READ_SIZE, limit + 1 - total), decode_content=True):
        parts.append(data)
        total += len(data)
        if total > limit:
            raise RegistryError(f"{what}: the answer is larger than the {limit} bytes ckit reads for it",
                                hint="the server is misbehaving or hostile (the limits: docs/safety.md)")
    return b"".join(parts)


def _late(what: str, seconds: float) -> RegistryError:
    return RegistryError(f"{what}: no complete answer within {seconds:.0f} s",
                         hint="the registry is too slow or stalled; CKIT_HTTP_TIMEOUT sets the deadline",
                         unreachable=True)


def no_answer(err: BaseException) -> bool:
    """The connection failed or timed out: the server gave no answer (a TLS failure is an answer: it refused)."""
    return isinstance(err, (requests.ConnectionError, requests.Timeout)) and not isinstance(
        err, requests.exceptions.SSLError)


def _sleep(seconds: float, what: str, why: str, attempt: int, policy: Policy) -> None:
    log.warning("%s: %s; retrying in %.1f s (%d of %d)", what, why, seconds, attempt + 1, policy.retries)
    time.sleep(seconds)


# --- streamed blob bodies ------------------------------------------------------------------------------------
class StreamBody:
    """A streamed body read as it arrives, held to the speed floor, cut off beyond ``limit`` bytes; every
    transport failure is a RegistryError naming ``what``."""

    def __init__(self, response: requests.Response, what: str, limit: int | None = None,
                 policy: Policy | None = None) -> None:
        self.response, self.what, self.limit = response, what, limit
        self.policy = policy or Policy.current()
        self.total = 0
        self._window_start, self._window_bytes = time.monotonic(), 0

    def read(self, amt: int | None = -1) -> bytes:
        if amt is None or amt < 0:
            parts = []
            while data := self.read(READ_SIZE):
                parts.append(data)
            return b"".join(parts)
        try:
            data = self.response.raw.read1(amt, decode_content=False)
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as err:
            raise RegistryError(f"{self.what}: the download broke off after {self.total} bytes "
                                f"({err.__class__.__name__})", hint="try again; the registry or network failed") \
                from err
        self.total += len(data)
        if self.limit is not None and self.total > self.limit:
            raise IntegrityError(f"{self.what}: the registry sent more than the {self.limit} bytes it should",
                                 hint="the content is corrupt or was altered; nothing was written")
        self._check_speed(len(data))
        return data

    def _check_speed(self, got: int) -> None:
        self._window_bytes += got
        elapsed = time.monotonic() - self._window_start
        if elapsed < self.policy.timeout:
            return
        if self._window_bytes < self.policy.min_speed * elapsed:
            raise RegistryError(f"{self.what}: the download stalled ({self._window_bytes} bytes in "
                                f"{elapsed:.0f} s, less than {self.policy.min_speed} bytes/s)",
                                hint="the registry is too slow or stalled; CKIT_HTTP_MIN_SPEED and "
                                     "CKIT_HTTP_TIMEOUT set the floor")
        self._window_start, self._window_bytes = time.monotonic(), 0
