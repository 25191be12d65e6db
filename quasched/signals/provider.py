"""What the live providers share: credentials from the environment or a file, and :class:`Provider`, one ``httpx``
client with timeouts whose JSON answers are cached per query for a TTL, bounded in size, not asked again before a
429's ``Retry-After`` (seconds or an HTTP date) nor, after a failure, before ``retry_s``."""

from __future__ import annotations

import json
import os
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from datetime import timezone
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator

import httpx

from quasched.signals.base import MissingCredential, Series, Unavailable, iso

#: how long a 429 without a readable ``Retry-After`` holds every further call, s
DEFAULT_RETRY_AFTER_S = 60.0


def credential(name: str) -> str:
    """``$name``, else the content of the file ``$name_FILE`` (stripped); :class:`MissingCredential` otherwise."""
    if os.environ.get(name):
        return os.environ[name]
    path = os.environ.get(f"{name}_FILE")
    if not path:
        raise MissingCredential(f"set {name} (or {name}_FILE, the path of a file holding it)")
    try:
        value = Path(path).read_text().strip()
    except OSError as err:
        raise MissingCredential(f"cannot read {name}_FILE={path}: {err.strerror or err}") from None
    if not value:
        raise MissingCredential(f"{name}_FILE={path} is empty")
    return value


def retry_at(value: str | None, now: float) -> float:
    """Epoch s from which a 429 answered at ``now`` allows the next call: ``Retry-After`` as seconds or an HTTP date."""
    text = (value or "").strip()
    if text.isdigit():
        return now + int(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return now + DEFAULT_RETRY_AFTER_S
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


@contextmanager
def parsing(what: str) -> Iterator[None]:
    """A missing key, a wrong type or a bad value while reading ``what``'s answer as :class:`Unavailable`."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:
        raise Unavailable(f"unexpected {what} answer ({type(err).__name__}: {err})") from None


class Refused(Unavailable):
    """HTTP 401: the provider refused the credential."""


class Provider(ABC):
    """A provider's API at ``base_url``. :meth:`get` answers a query's JSON: from the cache while it is younger than
    ``ttl_s`` (by ``clock``, epoch s); no call while a 429 holds, nor for ``retry_s`` after a query failed (its error
    again); each call within ``timeout_s`` and ``max_bytes``. Subclasses give the credential's headers
    (:meth:`_headers`, renewed once on a 401 if :meth:`_renew` says so) and read the answers into :class:`Series`."""

    name: ClassVar[str]
    #: attribution of the provider's data, printed beside results computed from it
    source: ClassVar[str]

    def __init__(self, base_url: str, *, clock: Callable[[], float] = time.time, ttl_s: float = 900.0,
                 retry_s: float = 60.0, timeout_s: float = 10.0, max_bytes: int = 2 ** 21) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=timeout_s)
        self.clock, self.ttl_s, self.retry_s = clock, ttl_s, retry_s
        self.timeout_s, self.max_bytes = timeout_s, max_bytes
        self.blocked_until = 0.0
        self._cache: dict[tuple, tuple[float, Any]] = {}
        self._failed: dict[tuple, tuple[float, Unavailable]] = {}

    @abstractmethod
    def forecast(self, zone: str) -> Series:
        """The zone's current value and forecast; :class:`Unavailable` if the provider cannot give them."""

    @abstractmethod
    def history(self, zone: str, start: int, end: int) -> Series:
        """The zone's hourly values from ``start`` to ``end`` (epoch s, hours), as far as the provider keeps them."""

    @abstractmethod
    def _headers(self) -> dict[str, str]:
        """The credential's request headers."""

    def _renew(self) -> bool:
        """After a 401: may a call with fresh :meth:`_headers` succeed? (A fixed token: no.)"""
        return False

    def close(self) -> None:
        self.client.close()

    def get(self, path: str, **params: str) -> Any:
        """The JSON answer to ``GET path?params`` (see the class); :class:`Unavailable` if there is none."""
        key = (path, tuple(sorted(params.items())))
        now = self.clock()
        if key in self._cache and now - self._cache[key][0] < self.ttl_s:
            return self._cache[key][1]
        if now < self.blocked_until:
            raise Unavailable(f"rate limited (HTTP 429) until {iso(self.blocked_until)}")
        if key in self._failed and now < self._failed[key][0]:
            raise self._failed[key][1]
        try:
            try:
                answer = self._call(path, params, self._headers())
            except Refused:
                if not self._renew():
                    raise
                answer = self._call(path, params, self._headers())
        except Unavailable as err:
            self._failed = {k: v for k, v in self._failed.items() if now < v[0]} | {key: (now + self.retry_s, err)}
            raise
        self._failed.pop(key, None)
        self._cache = {k: v for k, v in self._cache.items() if now - v[0] < self.ttl_s} | {key: (now, answer)}
        return answer

    def _call(self, path: str, params: dict[str, str], headers: dict[str, str],
              auth: tuple[str, str] | None = None) -> Any:
        """One request's JSON answer; a 429 holds further calls until its ``Retry-After``."""
        what = f"GET {path}"
        try:
            with self.client.stream("GET", path, params=params, headers=headers, auth=auth) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > self.max_bytes:
                        raise Unavailable(f"{what}: the answer exceeds {self.max_bytes:,} bytes")
        except httpx.TimeoutException:
            raise Unavailable(f"{what}: no answer within {self.timeout_s:g} s") from None
        except httpx.HTTPError as err:
            raise Unavailable(f"{what}: {type(err).__name__}: {err}") from None
        if response.status_code == 429:
            self.blocked_until = max(self.blocked_until, retry_at(response.headers.get("Retry-After"), self.clock()))
            raise Unavailable(f"rate limited (HTTP 429) until {iso(self.blocked_until)}")
        if response.status_code == 401:
            raise Refused(f"{what}: HTTP 401, the credential was refused")
        if not 200 <= response.status_code < 300:
            raise Unavailable(f"{what}: HTTP {response.status_code}")
        try:
            return json.loads(body)
        except ValueError:
            raise Unavailable(f"{what}: the answer is not JSON") from None
