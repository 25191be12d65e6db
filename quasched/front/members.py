"""The front's members: running ``quasched serve`` clusters in grid zones, reached over their API with a token.

A members file (TOML) lists them::

    [[member]]
    name = "north"                       # how the front names it (letters, digits, - and _)
    url = "https://gpu-north.example:8080"
    zone = "SE"                          # the grid zone of its carbon signal
    pue = 1.15                           # facility energy / IT energy
    token_file = "/etc/quasched/north.token"   # an admin token of the member (it submits for every team)
    ca_file = "/etc/quasched/north-ca.crt"     # optional: the CA its TLS certificate is checked against
    signal = "electricitymaps"           # the zone's intensity: electricitymaps, watttime or file (the default)
    signal_zone = "SE"                   # optional: the provider's name of the zone (a WattTime region)

Errors name the file, the member and the field. The member's queues carry the front's team names: a job of team
``vision`` goes to the member's queue ``vision``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: one call to a member waits at most this long, s (the front's loop must not stall on a member that hangs)
CALL_TIMEOUT_S = 5.0
#: the largest answer the front reads from a member, bytes
MAX_ANSWER = 8 << 20
NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"


class MemberError(Exception):
    """A member could not be reached or answered wrongly (the message says which and why)."""


class MemberConfig(BaseModel):
    """One member of the members file (module docstring)."""
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME)
    url: str = Field(pattern=r"^https?://[^\s]+$")
    zone: str = Field(min_length=1, max_length=64)
    pue: float = Field(1.0, ge=1.0, le=5.0)
    token_file: Path
    ca_file: Path | None = None
    signal: Literal["file", "electricitymaps", "watttime"] = "file"
    signal_zone: str = Field("", max_length=64)


def read_members(path: Path) -> list[MemberConfig]:
    """The members of ``path``; :class:`ValueError` naming the file, the member and the field of what is wrong."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"{path}: cannot read: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not TOML: {err}") from None
    entries = data.get("member")
    unknown = sorted(set(data) - {"member"})
    if unknown:
        raise ValueError(f"{path}: unknown table {unknown[0]!r}; members are [[member]] tables")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: no [[member]] tables")
    members: list[MemberConfig] = []
    for i, entry in enumerate(entries, 1):
        try:
            members.append(MemberConfig.model_validate(entry))
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "member"
            raise ValueError(f"{path}: member {i} ({entry.get('name', '?')}): {field}: {first['msg']}") from None
    names = [m.name for m in members]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{path}: member {twice[0]!r} is listed twice")
    return members


class ServeMember:
    """The API of one member (``/api/v1``): its nodes, submitting a job, reading and cancelling it."""

    def __init__(self, config: MemberConfig, transport: httpx.BaseTransport | None = None) -> None:
        self.config = config
        try:
            token = config.token_file.read_text().strip()
        except OSError as err:
            raise ValueError(f"member {config.name}: token_file {config.token_file}: {err.strerror or err}") from None
        if not token:
            raise ValueError(f"member {config.name}: token_file {config.token_file} is empty")
        verify: Any = str(config.ca_file) if config.ca_file else True
        self.http = httpx.Client(base_url=config.url.rstrip("/") + "/api/v1", timeout=CALL_TIMEOUT_S, verify=verify,
                                 headers={"Authorization": f"Bearer {token}"}, transport=transport)

    @property
    def name(self) -> str:
        return self.config.name

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            answer = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            raise MemberError(f"member {self.name}: {method} {path}: {type(err).__name__}: {err}") from None
        if len(answer.content) > MAX_ANSWER:
            raise MemberError(f"member {self.name}: {method} {path}: answer over {MAX_ANSWER} bytes")
        if answer.status_code >= 400:
            raise MemberError(f"member {self.name}: {method} {path}: HTTP {answer.status_code}: {answer.text[:300]}")
        try:
            return answer.json()
        except ValueError:
            raise MemberError(f"member {self.name}: {method} {path}: not JSON") from None

    def nodes(self) -> list[dict[str, Any]]:
        """The member's nodes (``GET /nodes``: capacity, per-device use, jobs)."""
        found = self._call("GET", "/nodes")
        if not isinstance(found, list):
            raise MemberError(f"member {self.name}: GET /nodes: not a list")
        return found

    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        """Submit a job (``body``: the API's job fields, with its ``client_token``, so a repeat returns the first)."""
        return dict(self._call("POST", "/jobs", json=body))

    def job(self, remote: str) -> dict[str, Any]:
        """The member's job ``remote`` (its id, as :meth:`submit` answered it)."""
        return dict(self._call("GET", f"/jobs/{self._id(remote)}"))

    def cancel(self, remote: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/jobs/{self._id(remote)}/cancel"))

    def _id(self, remote: str) -> int:
        if not remote.isdigit():
            raise MemberError(f"member {self.name}: {remote!r} is not one of its job ids")
        return int(remote)

    def close(self) -> None:
        self.http.close()
