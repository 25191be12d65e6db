"""One writer per database (docs/service.md, "One writer and fail-over").

SQLite: the writer holds an exclusive OS lock (``flock``) on ``<database>.lock`` beside the database file itself
(symbolic links resolved) for its life; the file names the holder, so a second server, under any name of the
database, exits saying who holds it; a server that still holds its lock takes a lease it lost back. PostgreSQL: a lease row with a
time-to-live and an epoch; the leader renews it, standbys try to take it once it has expired, and every
write of the store checks in its own transaction that the lease's epoch is still the writer's
(:meth:`~.database.Store.fence`), so a leader that stalled and wakes after a take-over commits nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import IO, NamedTuple, Protocol

#: seconds a lease lasts unless renewed; a standby takes over at most this long (plus one renewal interval and
#: the rebuild) after the leader died
LEASE_TTL_S = 5.0
#: renewals (and take-over attempts) per time-to-live
RENEWALS_PER_TTL = 5


class Holder(NamedTuple):
    """Who holds (or last held) the lease: identity ``host:pid``, its advertised URL, since when, the epoch."""
    holder: str
    url: str
    since: float
    epoch: int
    alive: bool = True

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since))
        where = f" at {self.url}" if self.url else ""
        return f"{self.holder}{where} (epoch {self.epoch}, since {since})"


class LeaderHeld(RuntimeError):
    """Another process holds the SQLite database's lock."""


class Fenced(RuntimeError):
    """The lease's epoch moved on: another server took over; this one must not write."""


def identity() -> str:
    """This process as a lease holder: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


class FileLock:
    """An exclusive ``flock`` on ``path`` (a sidecar of the SQLite database), released by :meth:`release` or
    when the process ends; while held the file names the holder (pid, host, since)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def acquire(self, url: str = "") -> None:
        """Take the lock (a no-op while held), or raise :class:`LeaderHeld` naming its holder."""
        if self._file is not None:
            return
        file = open(self.path, "a+")
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            text = file.read()
            file.close()
            raise LeaderHeld(f"another quasched serve schedules this database: {self._describe(text)} "
                             f"(lock file {self.path}); stop it first — one server per SQLite database "
                             "(PostgreSQL runs a standby)") from None
        file.seek(0)
        file.truncate()
        json.dump({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "url": url}, file)
        file.flush()
        self._file = file

    @staticmethod
    def _describe(text: str) -> str:
        try:
            info = json.loads(text)
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(info["since"])))
            return f"pid {info['pid']} on {info['host']} since {since}" + (f" at {info['url']}" if info.get("url") else "")
        except (ValueError, KeyError, TypeError):
            return "a process that has not written its name yet"

    def intact(self) -> bool:
        """Whether this process holds the lock and ``path`` still names the file locked (not removed or replaced,
        which would let another server lock a new file)."""
        if self._file is None:
            return False
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(self._file.fileno())
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the file releases the lock
            self._file = None


class LeaseStore(Protocol):
    """The store's side of the lease (:class:`~.database.Store`)."""

    def acquire_lease(self, holder: str, url: str, ttl_s: float | None) -> int | None: ...

    def renew_lease(self, ttl_s: float | None) -> bool: ...

    def lock_intact(self) -> bool: ...


class Candidate(Protocol):
    """The service's side: whether it is the leader, taking over and stepping down."""

    leading: bool

    def take_over(self, epoch: int) -> None: ...

    def step_down(self, reason: str) -> None: ...

    def settle(self) -> None: ...


class Elector:
    """A thread that keeps the lease: the leader renews it every ``ttl_s / RENEWALS_PER_TTL`` and steps down when a
    renewal is refused or none succeeded for ``ttl_s``; a standby (``standby=True``), or a sole writer that lost the
    lease while its lock is intact (:meth:`~.database.Store.lock_intact`), tries to take it as often. A won lease is
    renewed from the start: the take-over (the rebuild from the store) runs in its own thread."""

    def __init__(self, store: LeaseStore, candidate: Candidate, url: str, ttl_s: float = LEASE_TTL_S,
                 standby: bool = True) -> None:
        self.store, self.candidate, self.url, self.ttl_s = store, candidate, url, ttl_s
        self.standby = standby
        self.interval = ttl_s / RENEWALS_PER_TTL
        #: whether this server holds the lease (from the win, before the take-over has finished)
        self.held = candidate.leading
        self._renewed = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Run the elector; a sole writer (SQLite) that gave its lock up at a stop takes it again first, rebuilding
        from the store (another server may have written meanwhile), or raises :class:`LeaderHeld`."""
        if not self.standby and not self.candidate.leading:
            epoch = self.store.acquire_lease(identity(), self.url, self.ttl_s)
            if epoch is not None:
                self.held = True
                self.candidate.take_over(epoch)
        if self._thread is None:
            self._stop.clear()
            self._renewed = time.monotonic()
            self._thread = threading.Thread(target=self._run, name="quasched-lease", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def current(self) -> bool:
        """Whether this server holds the lease and renewed it within its TTL (one stalled longer, e.g. paused,
        may have lost it to another server without knowing yet)."""
        return self.held and time.monotonic() - self._renewed < self.ttl_s

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.round()
            except Exception as err:  # the database is unreachable: the next round retries
                print(f"quasched: lease: {err!r}", file=sys.stderr)
                if self.held and time.monotonic() - self._renewed > self.ttl_s:
                    self.held = False
                    self.candidate.step_down(f"the lease could not be renewed for {self.ttl_s:g} s")

    def round(self) -> None:
        """One renewal (leader) or take-over attempt (standby); then let the service settle its role."""
        if self.held:
            started = time.monotonic()
            if self.store.renew_lease(self.ttl_s):
                self._renewed = started
            else:
                self.held = False
                self.candidate.step_down("another server took the lease over")
        elif self.standby or self.store.lock_intact():
            epoch = self.store.acquire_lease(identity(), self.url, self.ttl_s)
            if epoch is not None:
                self.held, self._renewed = True, time.monotonic()
                threading.Thread(target=self.candidate.take_over, args=(epoch,), name="quasched-take-over",
                                 daemon=True).start()
        self.candidate.settle()
