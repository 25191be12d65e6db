"""Bearer tokens: admin tokens do everything, a team token acts for its team, any valid token reads.

Secrets are checked against the store, which keeps only their SHA-256; the leader keeps the valid ones it has
seen in a :class:`TokenCache`. FastAPI dependencies (none takes a thread unless the token is not cached):

* :func:`reader` — any valid token (401 without or with an unknown token);
* :func:`team_or_admin` — a token that may change jobs (an admin, or a team token);
  the endpoint then checks the job's team with :meth:`Principal.require_team` (403);
* :func:`admin` — admin tokens only (403 for a team token);
* :meth:`Principal.may_read` — who reads a job's log and private fields (its team's tokens, admins): every other
  token sees only the job's scheduling facts;
* :func:`stream_reader` — like :func:`reader`, also accepting ``?token=`` (the browser's
  ``EventSource`` cannot send headers).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Query, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from quasched.service.store.database import TokenInfo, digest


@dataclass(frozen=True)
class Principal:
    """Who calls: a token's name, its team (None for admin tokens) and whether it is an admin; and the token itself
    (for the live streams, which end when it stops working)."""

    name: str
    team: str | None
    admin: bool
    secret: str = field(default="", repr=False, compare=False)

    def may_act_for(self, team: str) -> bool:
        return self.admin or self.team == team

    def may_read(self, team: str) -> bool:
        """Whether this token reads the log and the private fields of ``team``'s jobs (command, env, workdir,
        what the run left: its exit and output): the team's tokens and admins."""
        return self.may_act_for(team)

    def require_reader(self, team: str) -> None:
        """403 unless this token may read the log and private fields of ``team``'s jobs (:meth:`may_read`)."""
        if not self.may_read(team):
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                f"token {self.name!r} reads for team {self.team!r}, not {team!r}")

    def require_team(self, team: str) -> None:
        """403 unless this token may change jobs of ``team``."""
        if not self.may_act_for(team):
            raise HTTPException(status.HTTP_403_FORBIDDEN,
                                f"token {self.name!r} acts for team {self.team!r}, not {team!r}")


class TokenCache:
    """Valid tokens by the SHA-256 of their secret, so that a request reads no database.

    Only the leader caches: tokens change only through it (a standby refuses writes), and it clears the
    cache when it revokes one; expiry is checked at every :meth:`get`. A standby reads the store every time
    (the leader may revoke a token at any moment), and the cache is cleared whenever leadership changes; a
    leader that has not renewed its lease within the TTL (stalled: it may have lost it) reads the store too.
    """

    def __init__(self) -> None:
        self._valid: dict[str, TokenInfo] = {}
        self._mutex = threading.Lock()
        #: advanced by :meth:`clear`: a lookup that read the store before a revocation does not cache its answer
        self.generation = 0

    def get(self, secret: str, now: float) -> TokenInfo | None:
        """The cached token of ``secret`` (None if not cached, or expired by ``now``)."""
        info = self._valid.get(digest(secret))
        if info is None or (info.expires_at is not None and info.expires_at <= now):
            return None
        return info

    def put(self, secret: str, info: TokenInfo, generation: int) -> None:
        """Cache ``info``, read from the store at ``generation`` (dropped if the cache was cleared since)."""
        with self._mutex:
            if generation == self.generation:
                self._valid[digest(secret)] = info

    def clear(self) -> None:
        with self._mutex:
            self.generation += 1
            self._valid.clear()


def masked(secret: str) -> str:
    """A token as logs and banners show it: its first and last four characters."""
    return f"{secret[:4]}…{secret[-4:]}"


bearer = HTTPBearer(auto_error=False, description="An API token: `Authorization: Bearer <token>`.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]

UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


async def principal_of(request: Request, secret: str | None) -> Principal:
    """The principal of ``secret`` (401 if missing or unknown)."""
    if not secret:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing bearer token", headers=UNAUTHORIZED)
    service = request.app.state.service
    found = service.cached_token(secret) or await run_in_threadpool(service.lookup_token, secret)
    if found is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "unknown, expired or revoked token", headers=UNAUTHORIZED)
    name, team, is_admin = found[:3]
    return Principal(str(name), None if team is None else str(team), bool(is_admin), secret)


async def reader(request: Request, credentials: Credentials) -> Principal:
    """Dependency: the principal of the bearer token (any valid token)."""
    return await principal_of(request, credentials.credentials if credentials else None)


async def stream_reader(request: Request, credentials: Credentials,
                  token: Annotated[str | None, Query(max_length=512, description=(
                      "The token, for clients that cannot send headers (EventSource)."))] = None) -> Principal:
    """Dependency: like :func:`reader`, also accepting ``?token=`` (EventSource cannot send headers)."""
    return await principal_of(request, credentials.credentials if credentials else token)


async def team_or_admin(who: Annotated[Principal, Depends(reader)]) -> Principal:
    """Dependency: a team or admin token (403 for read-only tokens)."""
    if not (who.admin or who.team):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"token {who.name!r} may only read")
    return who


async def admin(who: Annotated[Principal, Depends(reader)]) -> Principal:
    """Dependency: an admin token (403 otherwise)."""
    if not who.admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"token {who.name!r} is not an admin token")
    return who


Reader = Annotated[Principal, Depends(reader)]
StreamReader = Annotated[Principal, Depends(stream_reader)]
TeamOrAdmin = Annotated[Principal, Depends(team_or_admin)]
Admin = Annotated[Principal, Depends(admin)]
