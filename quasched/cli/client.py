"""The service's client commands: ``submit``, ``jobs``, ``job``, ``queues``, ``queue``, ``nodes``,
``cancel``, ``complete``, ``token`` and ``tokens``, each one call of the HTTP API (server and token from options, the environment or the
token file ``quasched serve`` wrote), printed as a line or a rich table."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Optional

import typer

from quasched.cli.common import console, fail, finite_number
from quasched.report.wording import counted, quota_text

SERVER_HELP = "The quasched server (default: $QUASCHED_SERVER, else http://127.0.0.1:8080)."
TOKEN_HELP = "API token (default: $QUASCHED_TOKEN, else the file ./quasched.token written by `quasched serve`)."
TOKEN_FILE = Path("quasched.token")
ServerOption = typer.Option("http://127.0.0.1:8080", "--server", envvar="QUASCHED_SERVER", help=SERVER_HELP)
TokenOption = typer.Option(None, "--token", envvar="QUASCHED_TOKEN", help=TOKEN_HELP, show_default=False)


def resolve_token(token: str | None) -> str | None:
    """The ``--token``/``$QUASCHED_TOKEN`` value, else the token file ``quasched serve`` wrote, else ``None``;
    a clean error for one an HTTP header cannot carry (tokens are printable ASCII)."""
    secret, origin = (token.strip(), "--token or $QUASCHED_TOKEN") if token else (None, "")
    if secret is None and TOKEN_FILE.is_file():
        secret, origin = TOKEN_FILE.read_text(errors="replace").strip() or None, f"the file {TOKEN_FILE}"
    if secret is not None and not (secret.isascii() and secret.isprintable()):
        fail(f"the API token from {origin} is not printable ASCII; pass the token `quasched serve` or "
             "`quasched token` printed")
    return secret


def api_error(response: Any) -> str:
    """One readable line (or a few) for a 4xx/5xx reply."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = response.text.strip()[:300] or response.reason_phrase
    if isinstance(detail, list):
        lines = []
        for item in detail:
            loc = [str(p) for p in item.get("loc", []) if p not in ("body", "query", "path")]
            lines.append(f"{'.'.join(loc) or 'request'}: {item.get('msg', item)}")
        detail = "; ".join(lines)
    hint = ""
    if response.status_code == 401:
        hint = " (set QUASCHED_TOKEN or --token, or run where quasched serve wrote quasched.token)"
    return f"{response.status_code} {detail}{hint}"


#: seconds between the attempts of a request that is safe to repeat (a submit with its client_token)
RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)


def call(server: str, token: str | None, method: str, path: str, retry: bool = False, **kwargs: Any) -> Any:
    """``method path`` on the server's API; a clean error (exit 2) when it cannot be reached or refuses.
    With ``retry`` (an idempotent request), a lost connection or reply, or a 503 (a standby, a fail-over under
    way), is tried again after each of :data:`RETRY_DELAYS`."""
    import httpx

    secret = resolve_token(token)
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    url = server.rstrip("/") + "/api/v1" + path
    delays = list(RETRY_DELAYS) if retry else []
    while True:
        try:
            response = httpx.request(method, url, headers=headers, timeout=30.0, **kwargs)
            if response.status_code != 503 or not delays:
                break
            console.print(f"[dim]{server}: 503, a standby or a take-over under way; trying again[/]")
            time.sleep(delays.pop(0))
        except (httpx.TransportError, httpx.TimeoutException) as err:
            if not delays:
                if isinstance(err, httpx.ConnectError):
                    fail(f"cannot connect to the quasched server at {server} (is `quasched serve` running? "
                         "see --server)")
                if isinstance(err, httpx.TimeoutException):
                    fail(f"the quasched server at {server} did not answer in time")
                fail(f"request to {server} failed: {err}")
            console.print(f"[dim]{server}: {type(err).__name__}; trying again (a repeat is harmless)[/]")
            time.sleep(delays.pop(0))
        except httpx.HTTPError as err:
            fail(f"request to {server} failed: {err}")
    if response.status_code >= 400:
        fail(api_error(response))
    return response.json() if response.content else None


def gpus_text(gpus: float) -> str:
    """GPUs as the shortest text (``0.5``, ``8``)."""
    return f"{gpus:g}"


def placement_text(job: dict[str, Any]) -> str:
    """A job's placement as ``node[dev,dev] node[dev]``."""
    parts = []
    for p in job["placement"]:
        devices = ",".join(map(str, p["devices"]))
        parts.append(f"{p['node']}[{devices}]" if devices else p["node"])
    return " ".join(parts)


def age(seconds: float | None) -> str:
    """Time since the epoch second ``seconds`` as :func:`coarse_duration` (empty for ``None``)."""
    return "" if seconds is None else coarse_duration(time.time() - seconds)


def coarse_duration(seconds: float) -> str:
    """``seconds`` in its largest unit, rounded: ``40s``, ``12m``, ``5h``, ``3d``; a count that rounds up to the next
    unit is shown in it (59.6 s is ``1m`` and 3,599 s ``1h``, never ``60s`` or ``60m``)."""
    seconds = max(0.0, seconds)
    for unit, size, most in (("s", 1, 60), ("m", 60, 60), ("h", 3600, 24)):
        if (count := round(seconds / size)) < most:
            return f"{count}{unit}"
    return f"{round(seconds / 86400)}d"


STATE_STYLE = {"running": "green", "pending": "yellow", "preempting": "magenta", "stopping": "magenta",
               "succeeded": "dim", "failed": "red", "cancelled": "dim"}


def submit(
    command: Optional[list[str]] = typer.Argument(None, help=(
        "After --: the command to run when the job is placed on the service's machine "
        "(quasched submit --gpus 1 -- python train.py --lr 3e-4)."), show_default=False),
    team: str = typer.Option("default", help="The team's queue."),
    name: Optional[str] = typer.Option(None, help="Job name (default: the command, shortened).",
                                       show_default=False),
    gpus: float = typer.Option(0.0, callback=finite_number,
                               help="GPUs per pod: 0, a share of one device (0.5), or whole GPUs (2)."),
    cpu: float = typer.Option(1.0, callback=finite_number, help="CPU cores per pod."),
    memory: str = typer.Option("4GiB", help="Memory per pod: 16GiB, 512MiB, 1.5Gi or MiB."),
    duration: Optional[str] = typer.Option(None, help="Run time after which the service finishes it: 2h, 90m, 30s."),
    gpu_model: str = typer.Option("", help="GPU model (e.g. A100); empty = any."),
    pods: int = typer.Option(1, help="Gang size: pods placed all-or-nothing."),
    priority_class: str = typer.Option("normal", help="Priority class: low, normal, high."),
    user: Optional[str] = typer.Option(None, help="User (default: $USER)."),
    app_name: str = typer.Option("", "--app", help="Application name."),
    client_token: Optional[str] = typer.Option(None, help=(
        "Idempotency key: resubmitting returns the first job (default: a new random key, kept across the "
        "command's own retries)."), show_default=False),
    env: list[str] = typer.Option([], "--env", help="KEY=VALUE for the command's environment (repeatable)."),
    workdir: str = typer.Option("", help="Absolute working directory of the command."),
    time_limit: Optional[str] = typer.Option(None, help="Longest run (2h, 90m): past it the job is stopped and fails."),
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """Submit a job, e.g. quasched submit --team vision --gpus 0.5 --cpu 4 --memory 16GiB -- python train.py."""
    import os
    import uuid

    argv = list(command or [])
    if name is None:
        if not argv:
            fail("give --name, or a command after --")
        name = " ".join([argv[0].rsplit("/", 1)[-1], *argv[1:]])[:60]
    variables = dict(item.partition("=")[::2] for item in env)
    if any("=" not in item for item in env):
        fail(f"--env {next(i for i in env if '=' not in i)!r}: write KEY=VALUE")
    body: dict[str, Any] = {"name": name, "team": team, "gpus": gpus, "cpu": cpu, "memory": memory,
                            "pods": pods, "priority_class": priority_class, "gpu_model": gpu_model, "app": app_name,
                            "user": user if user is not None else os.environ.get("USER", ""),
                            "client_token": client_token or uuid.uuid4().hex}
    if duration is not None:
        body["duration"] = duration
    if argv:
        body.update(command=argv, env=variables, workdir=workdir)
    if time_limit is not None:
        body["time_limit"] = time_limit
    job = call(server, token, "POST", "/jobs", retry=True, json=body)
    where = f" on {placement_text(job)}" if job["placement"] else ""
    reason = f" — {job['reason']['code']}: {job['reason']['message']}" if job.get("reason") else ""
    console.print(f"job {job['id']} ({job['name']}) {job['state']}{where}{reason}")


def jobs(
    state: Optional[str] = typer.Option(None, help="Only jobs in this state: pending, running, preempting, "
                                                   "stopping, succeeded, failed, cancelled."),
    team: Optional[str] = typer.Option(None, help="Only this team's jobs."),
    limit: int = typer.Option(50, min=1, max=1000, help="At most this many (newest first)."),
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """List jobs, newest first."""
    from rich.table import Table

    params: dict[str, Any] = {"limit": limit}
    if state:
        params["state"] = state
    if team:
        params["team"] = team
    rows = call(server, token, "GET", "/jobs", params=params)
    table = Table(title=counted(len(rows), "job"))
    for column in ("id", "name", "team", "state", "pos", "gpus", "pods", "placement", "age", "reason"):
        table.add_column(column, justify="right" if column in ("id", "pos", "gpus", "pods") else "left")
    for job in rows:
        reason = job["reason"]
        table.add_row(str(job["id"]), job["name"], job["team"],
                      f"[{STATE_STYLE.get(job['state'], '')}]{job['state']}[/]",
                      "" if job["position"] is None else str(job["position"]), gpus_text(job["gpus"]),
                      str(job["pods"]), placement_text(job), age(job["submitted_at"]),
                      f"{reason['code']}: {reason['message']}" if reason else "")
    console.print(table)


def queues(server: str = ServerOption, token: Optional[str] = TokenOption) -> None:
    """Queues: quota, GPUs used and borrowed, fair share, pending and running jobs."""
    from rich.table import Table

    rows = call(server, token, "GET", "/queues")
    table = Table(title="queues")
    for column in ("queue", "cohort", "quota (GPUs)", "used", "borrowed", "fair share", "weight", "pending",
                   "running"):
        table.add_column(column, justify="left" if column in ("queue", "cohort", "quota (GPUs)") else "right")
    for q in rows:
        quota = ", ".join(f"{k}={v:g}" for k, v in q["quota"].items()) or "unlimited"
        table.add_row(q["name"], q["cohort"], quota, f"{q['used_gpus']:g}", f"{q['borrowed_gpus']:g}",
                      f"{q['fair_share_gpus']:.2f}", f"{q['weight']:g}", str(q["pending"]), str(q["running"]))
    console.print(table)


def queue(
    name: str = typer.Argument(..., help="Queue (team) name."),
    quota: list[str] = typer.Option([], help="Nominal GPUs per model, MODEL=N (repeatable; '*=N' covers "
                                             "every model not named). No quota: unlimited."),
    cohort: str = typer.Option("", help="Cohort whose queues lend each other unused quota."),
    borrowing_limit: Optional[float] = typer.Option(None, callback=finite_number,
                                                    help="Most GPUs borrowed beyond the quota."),
    weight: float = typer.Option(1.0, callback=finite_number, help="Fair-share weight."),
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """Create or change a team's queue (needs an admin token)."""
    quotas: dict[str, float] = {}
    for item in quota:
        model, sep, amount = item.partition("=")
        try:
            gpus = float(amount)
        except ValueError:
            gpus = math.nan
        if not sep or not model.strip() or not math.isfinite(gpus):
            fail(f"--quota {item!r}: write MODEL=GPUS, e.g. A100=8 or '*=4'")
        quotas[model.strip()] = gpus
    body = {"quota": quotas, "cohort": cohort, "borrowing_limit": borrowing_limit, "weight": weight}
    q = call(server, token, "PUT", f"/queues/{name}", json=body)
    console.print(f"queue {q['name']}: quota {quota_text(q['quota'])}, cohort {q['cohort'] or '-'}, "
                  f"weight {q['weight']:g}")


def nodes(server: str = ServerOption, token: Optional[str] = TokenOption) -> None:
    """Nodes: GPU model, GPUs in use and healthy, CPU and memory in use, cordon, jobs."""
    from rich.table import Table

    rows = call(server, token, "GET", "/nodes")
    table = Table(title=counted(len(rows), "node"))
    for column in ("node", "model", "GPUs used", "healthy", "CPU used", "memory used", "status", "jobs"):
        table.add_column(column, justify="left" if column in ("node", "model", "status", "jobs") else "right")
    for n in rows:
        healthy = sum(n["gpu_healthy"])
        table.add_row(
            n["name"], n["gpu_model"] or "-", f"{sum(n['gpu_used_milli']) / 1000:g}/{n['num_gpus']}",
            f"{healthy}/{n['num_gpus']}", f"{n['cpu_used_milli'] / 1000:g}/{n['cpu_milli'] / 1000:g}",
            f"{n['memory_used_mib'] / 1024:.0f}/{n['memory_mib'] / 1024:.0f}Gi",
            "[yellow]cordoned[/]" if n["cordoned"] else "ready", " ".join(map(str, n["jobs"])))
    console.print(table)


def cancel(
    job: int = typer.Argument(..., help="Job id."),
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """Cancel a pending or running job."""
    done = call(server, token, "POST", f"/jobs/{job}/cancel")
    console.print(f"job {done['id']} ({done['name']}) {done['state']}")


def job(
    job_id: int = typer.Argument(..., metavar="JOB", help="Job id."),
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """A job in detail: request, state, placement, queue position, reason, command, env, exit and its events."""
    from rich.markup import escape

    j = call(server, token, "GET", f"/jobs/{job_id}")
    console.print(f"[bold]job {j['id']}[/] ({j['name']}) {j['state']}, team {j['team']}, {j['priority_class']}")
    console.print(f"  asks {j['pods']} x ({gpus_text(j['gpus'])} GPU {j['gpu_model'] or 'any model'}, "
                  f"{j['cpu']:g} CPU, {j['memory_mib']} MiB)")
    if j["placement"]:
        console.print(f"  on {placement_text(j)}")
    if j["position"] is not None:
        console.print(f"  queue position {j['position']}")
    if j["reason"]:
        console.print(f"  {j['reason']['code']}: {j['reason']['message']}")
    for line in run_lines(j):
        console.print(f"  {escape(line)}")
    for ev in j["events"]:
        data = " ".join(f"{k}={v}" for k, v in ev["data"].items())
        console.print(f"  {when(ev['time'])} {ev['kind']}{' ' + ev['node'] if ev['node'] else ''} {data}".rstrip())


def run_lines(job: dict[str, Any]) -> list[str]:
    """What ``quasched job`` says of a job's command, env (secret-looking values masked by the server), workdir and
    exit; for another team's job, that they are its team's."""
    import shlex

    if job["command"] is None:
        return [f"command, env and exit: shown to team {job['team']} and admins"]
    lines = [f"command: {shlex.join(job['command'])}"] if job["command"] else []
    lines += [f"env: {' '.join(f'{k}={v}' for k, v in job['env'].items())}"] if job["env"] else []
    lines += [f"workdir: {job['workdir']}"] if job["workdir"] else []
    return lines + ([f"exit code: {job['exit_code']}"] if job["exit_code"] is not None else [])


def complete(
    job_id: int = typer.Argument(..., metavar="JOB", help="Job id."),
    failed: bool = typer.Option(False, "--failed", help="The job failed (default: it succeeded)."),
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """Report that a running job ended (for jobs without a command or duration)."""
    done = call(server, token, "POST", f"/jobs/{job_id}/complete", json={"failed": failed})
    console.print(f"job {done['id']} ({done['name']}) {done['state']}")


def token(
    name: str = typer.Argument(..., help="The token's name (e.g. vision-ci); unique."),
    team: Optional[str] = typer.Option(None, help="The team the token acts for (an existing queue)."),
    admin: bool = typer.Option(False, help="An admin token (no team)."),
    expires_in: Optional[str] = typer.Option(None, help="It stops working after this long: 30d, 12h, 90m."),
    revoke: bool = typer.Option(False, "--revoke", help="Revoke the token NAME instead: it stops working at once."),
    server: str = ServerOption,
    token_: Optional[str] = typer.Option(None, "--token", envvar="QUASCHED_TOKEN", help=TOKEN_HELP,
                                         show_default=False),
) -> None:
    """Create an API token (needs an admin token) and print its secret once; or revoke one with --revoke."""
    if revoke:
        call(server, token_, "DELETE", f"/tokens/{name}")
        console.print(f"token {name} revoked")
        return
    if admin == (team is not None):
        fail("give --team TEAM for a team token, or --admin")
    made = call(server, token_, "POST", "/tokens",
                json={"name": name, "team": team, "admin": admin, "expires_in": expires_in})
    console.print(made["token"])


def tokens(
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """API tokens: name, team or admin, expiry, revocation (needs an admin token; never shows a secret)."""
    from rich.table import Table

    table = Table(title="tokens")
    for column in ("name", "acts for", "expires", "revoked"):
        table.add_column(column)
    for t in call(server, token, "GET", "/tokens"):
        table.add_row(t["name"], "admin" if t["admin"] else t["team"], when(t["expires_at"]) or "never",
                      when(t["revoked_at"]))
    console.print(table)


def when(seconds: float | None) -> str:
    """An epoch second as ``2026-11-28 09:15 UTC`` (empty for ``None``)."""
    from datetime import datetime, timezone

    return "" if seconds is None else datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
