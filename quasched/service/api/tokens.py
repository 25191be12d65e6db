"""Routes of API tokens (admin): create (for an existing team, a unique name, optionally expiring), list, revoke."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import FastAPI, HTTPException, Path as PathParam, Response, status

from quasched.service.api.routing import API, field_error, not_found
from quasched.service.runtime.auth import Admin
from quasched.service.runtime.schemas import TEAM_PATTERN, TokenCreate, TokenInfoOut, TokenOut, parse_duration

if TYPE_CHECKING:
    from quasched.service.runtime.service import Service


def add_token_routes(app: FastAPI, service: Service) -> None:
    """Register the token routes of ``service`` on ``app``."""
    lock = service.lock

    @app.post(f"{API}/tokens", status_code=201, response_model=TokenOut, tags=["admin"],
              responses={409: {"description": "A token of that name exists."}})
    def create_token(body: TokenCreate, who: Admin) -> TokenOut:
        """A new API token (admin); the secret is shown once."""
        if body.admin == (body.team is not None):
            raise field_error("team", "give a team for a team token, or admin=true without a team")
        with lock:
            if body.team is not None and body.team not in service.ctl.quota.queues:
                raise field_error("team", f"unknown team {body.team!r}; known: "
                                          f"{', '.join(sorted(service.ctl.quota.queues))}")
            expires_at = None if body.expires_in is None else service.clock() + parse_duration(body.expires_in)
            try:
                secret = service.store.add_token(body.name, body.team, body.admin, expires_at)
            except ValueError as err:
                raise HTTPException(status.HTTP_409_CONFLICT, str(err)) from None
        return TokenOut(name=body.name, team=body.team, admin=body.admin, expires_at=expires_at, revoked_at=None,
                        token=secret)

    @app.get(f"{API}/tokens", response_model=list[TokenInfoOut], tags=["admin"])
    def list_tokens(who: Admin) -> list[TokenInfoOut]:
        """Every token: name, team, admin, expiry and revocation (never a secret)."""
        with lock:
            return [TokenInfoOut(**info._asdict()) for info in service.store.tokens()]

    @app.delete(f"{API}/tokens/{{name}}", status_code=204, tags=["admin"],
                responses={409: {"description": "The last working admin token."}})
    def revoke_token(name: Annotated[str, PathParam(min_length=1, max_length=63, pattern=TEAM_PATTERN)],
                     who: Admin) -> Response:
        """Revoke a token: it stops working at once (admin). The last working admin token cannot be revoked."""
        with lock:
            now = service.clock()
            tokens = {t.name: t for t in service.store.tokens()}
            target = tokens.get(name)
            if target is None:
                raise not_found(f"token {name!r}")
            working = [t for t in tokens.values() if t.admin and t.revoked_at is None
                       and (t.expires_at is None or t.expires_at > now)]
            if target.admin and [t.name for t in working] == [name]:
                raise HTTPException(status.HTTP_409_CONFLICT, f"{name!r} is the last working admin token; "
                                    "create another admin token first")
            service.revoke_token(name, now)
        return Response(status_code=204)
