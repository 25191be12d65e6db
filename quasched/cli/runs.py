"""Client commands of what jobs run on the service's machine: ``logs`` (whole, last lines, or
followed) and ``usage`` (per team: jobs, wall time, GPU-hours booked)."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from quasched.cli.client import ServerOption, TokenOption, api_error, call, resolve_token
from quasched.cli.common import console, fail


def logs(
    job: int = typer.Argument(..., help="Job id."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing what the job writes until it ends."),
    tail: Optional[int] = typer.Option(None, min=0, help="Only the last lines."),
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """Print a job's output (stdout and stderr of its command)."""
    import httpx

    secret = resolve_token(token)
    params: dict[str, str | int] = {"follow": str(follow).lower()}
    if tail is not None:
        params["tail"] = tail
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    url = f"{server.rstrip('/')}/api/v1/jobs/{job}/logs"
    try:
        with httpx.stream("GET", url, params=params, headers=headers,
                          timeout=httpx.Timeout(30.0, read=None if follow else 30.0)) as response:
            if response.status_code >= 400:
                response.read()
                fail(api_error(response))
            for chunk in response.iter_bytes():
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
    except httpx.ConnectError:
        fail(f"cannot connect to the quasched server at {server} (is `quasched serve` running? see --server)")
    except httpx.HTTPError as err:
        fail(f"reading the log from {server} failed: {err}")
    except KeyboardInterrupt:
        pass


def usage(
    since: Optional[float] = typer.Option(None, help="Only jobs submitted since this time (seconds since the epoch)."),
    server: str = ServerOption,
    token: Optional[str] = TokenOption,
) -> None:
    """Resource use per team: jobs, running now, wall time run and GPU-hours booked."""
    from rich.table import Table

    rows = call(server, token, "GET", "/usage", params={} if since is None else {"since": since})
    table = Table(title="usage")
    for column in ("team", "jobs", "running", "wall hours", "GPU-hours"):
        table.add_column(column, justify="left" if column == "team" else "right")
    for u in rows:
        table.add_row(u["team"], str(u["jobs"]), str(u["running"]), f"{u['wall_s'] / 3600:.3g}",
                      f"{u['gpu_hours']:.3g}")
    console.print(table)
