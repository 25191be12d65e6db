"""The front's members: clusters in grid zones, each a :class:`Member` to the front. A ``quasched serve`` cluster is
reached over its API with a token (:class:`ServeMember`); a Kubernetes cluster whose kube-scheduler runs quasched as
its extender, with a kubeconfig (:class:`~quasched.front.kubemember.KubeMember`: the front creates the jobs' pods).

A members file (TOML) lists them::

    [[member]]
    name = "north"                       # how the front names it (letters, digits, - and _)
    kind = "serve"                       # the default; or "kubernetes" (below)
    url = "https://gpu-north.example:8080"
    zone = "SE"                          # the grid zone of its carbon signal
    pue = 1.15                           # facility energy / IT energy
    token_file = "/etc/quasched/north.token"   # an admin token of the member (it submits for every team)
    ca_file = "/etc/quasched/north-ca.crt"     # optional: the CA its TLS certificate is checked against
    signal = "electricitymaps"           # the zone's intensity: electricitymaps, watttime or file (the default)
    signal_zone = "SE"                   # optional: the provider's name of the zone (a WattTime region)

    [[member]]
    name = "west"
    kind = "kubernetes"
    kubeconfig = "/etc/quasched/west.kubeconfig"   # its API server and credentials (docs/federation.md: RBAC)
    context = ""                         # optional: the kubeconfig's context (default: its current one)
    namespace = "gpu-jobs"               # where the front's pods go (default "default")
    image = "registry.example/train:1.4" # the container image of the front's jobs there (their command runs in it)
    scheduler_name = "quasched"          # optional: the kube-scheduler profile running quasched as its extender
    pod_spec = { tolerations = [] }      # optional: more fields of every pod's spec (the front's own win)
    zone = "FR"
    pue = 1.3

Errors name the file, the member and the field. The member's queues carry the front's team names: a job of team
``vision`` goes to the member's queue ``vision`` (on a Kubernetes member: its pods' annotation ``quasched.io/queue``).
"""

from __future__ import annotations

import ssl
import tomllib
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: one call to a member waits at most this long, s (the front's loop must not stall on a member that hangs)
CALL_TIMEOUT_S = 5.0
#: the largest answer the front reads from a member, bytes
MAX_ANSWER = 8 << 20
NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"
#: a Kubernetes namespace: a DNS label (RFC 1123)
NAMESPACE = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class MemberError(Exception):
    """A member could not be reached or answered wrongly (the message says which and why). ``delivered``: whether
    the call may have reached it and been acted on (False: the connection was refused, or it refused the call)."""

    def __init__(self, message: str, delivered: bool = True) -> None:
        super().__init__(message)
        self.delivered = delivered


class MemberBase(BaseModel):
    """What every member of the members file gives (module docstring): its name, zone, PUE and signal."""
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME)
    zone: str = Field(min_length=1, max_length=64)
    pue: float = Field(1.0, ge=1.0, le=5.0)
    signal: Literal["file", "electricitymaps", "watttime"] = "file"
    signal_zone: str = Field("", max_length=64)


class MemberConfig(MemberBase):
    """A ``quasched serve`` member (``kind = "serve"``, the default)."""

    kind: Literal["serve"] = "serve"
    url: str = Field(pattern=r"^https?://[^\s]+$")
    token_file: Path
    ca_file: Path | None = None


class KubeMemberConfig(MemberBase):
    """A Kubernetes member (``kind = "kubernetes"``): its kubeconfig, the namespace of the front's pods, their image."""

    kind: Literal["kubernetes"]
    kubeconfig: Path
    context: str = Field("", max_length=253)
    namespace: str = Field("default", pattern=NAMESPACE)
    image: str = Field(min_length=1, max_length=1024, pattern=r"^[^\s]+$")
    scheduler_name: str = Field("quasched", pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    pod_spec: dict[str, Any] = Field(default_factory=dict)


#: the members file's kinds
KINDS: dict[str, type[MemberConfig] | type[KubeMemberConfig]] = {"serve": MemberConfig, "kubernetes": KubeMemberConfig}


class Member(Protocol):
    """A member as the front uses it (:class:`ServeMember`, :class:`~quasched.front.kubemember.KubeMember`).

    ``nodes()``: its nodes as ``quasched serve``'s ``GET /api/v1/nodes`` entries (``name, gpu_model, num_gpus,
    cordoned, gpu_used_milli, gpu_healthy, cpu_milli, cpu_used_milli, memory_mib, memory_used_mib, jobs``, where
    ``jobs`` holds the member's names of the jobs on the node); ``submit(body)``: the job of ``body`` (serve's job
    fields with a ``client_token``: a repeat returns the first) → ``{"id": <its name of the job>, "state": ...}``;
    ``job(remote)`` and ``cancel(remote)`` → ``{"state": pending|running|succeeded|failed|cancelled, "started_at",
    "finished_at", "exit"}``. Every failure to reach it or a wrong answer is a :class:`MemberError`."""

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> MemberBase: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def submit(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def job(self, remote: str) -> dict[str, Any]: ...

    def cancel(self, remote: str) -> dict[str, Any]: ...

    def logs(self, remote: str, tail: int) -> str:
        """The job's output as the member keeps it, its last ``tail`` lines."""
        ...

    def close(self) -> None: ...


def read_members(path: Path) -> list[MemberConfig | KubeMemberConfig]:
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
    members: list[MemberConfig | KubeMemberConfig] = []
    for i, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: member {i}: not a table")
        where = f"{path}: member {i} ({entry.get('name', '?')})"
        kind = entry.get("kind", "serve")
        if kind not in KINDS:
            raise ValueError(f"{where}: kind: {' or '.join(map(repr, KINDS))}, not {kind!r}")
        try:
            members.append(KINDS[kind].model_validate(entry))
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "member"
            hint = f" (a {kind} member)" if first["type"] in ("missing", "extra_forbidden") else ""
            raise ValueError(f"{where}: {field}: {first['msg']}{hint}") from None
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
        try:
            verify: Any = ssl.create_default_context(cafile=str(config.ca_file)) if config.ca_file else True
        except (OSError, ssl.SSLError) as err:
            raise ValueError(f"member {config.name}: ca_file {config.ca_file}: {err}") from None
        self.http = httpx.Client(base_url=config.url.rstrip("/") + "/api/v1", timeout=CALL_TIMEOUT_S, verify=verify,
                                 headers={"Authorization": f"Bearer {token}"}, transport=transport)

    @property
    def name(self) -> str:
        return self.config.name

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            answer = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as err:
            raise MemberError(f"member {self.name}: {method} {path}: {type(err).__name__}: {err}",
                              delivered=not isinstance(err, httpx.ConnectError)) from None
        if len(answer.content) > MAX_ANSWER:
            raise MemberError(f"member {self.name}: {method} {path}: answer over {MAX_ANSWER} bytes")
        if answer.status_code >= 400:
            raise MemberError(f"member {self.name}: {method} {path}: HTTP {answer.status_code}: {answer.text[:300]}",
                              delivered=answer.status_code >= 500)
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

    def logs(self, remote: str, tail: int) -> str:
        try:
            answer = self.http.get(f"/jobs/{self._id(remote)}/logs", params={"tail": tail})
        except httpx.HTTPError as err:
            raise MemberError(f"member {self.name}: logs of job {remote}: {type(err).__name__}: {err}") from None
        if answer.status_code >= 400:
            raise MemberError(f"member {self.name}: logs of job {remote}: HTTP {answer.status_code}: "
                              f"{answer.text[:300]}", delivered=False)
        return answer.text[:MAX_ANSWER]

    def _id(self, remote: str) -> int:
        if not remote.isdigit():
            raise MemberError(f"member {self.name}: {remote!r} is not one of its job ids")
        return int(remote)

    def close(self) -> None:
        self.http.close()
