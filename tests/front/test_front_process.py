"""``quasched federate`` as a process: killed with SIGKILL and started again on its SQLite store, and two fronts on one
PostgreSQL database, the leader killed: the standby takes over. Nothing is sent to a member twice; the members are
real ``serve`` apps on 127.0.0.1, the zones the recorded intensities (greedy: the greener member now)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from api_support import bearer, live_server, make_app
from serve_process import FrontProcess, wait_for

#: recorded zones; at any hour one of them is the greener
ZONES = ("IN-WE", "GB")
API = "/api/v1"


@contextlib.contextmanager
def members(tmp: Path, carbon_dir: Path) -> Iterator[tuple[Path, list[tuple[str, str]]]]:
    """Two serve members and the members file naming them: (file, [(url, admin token)])."""
    with contextlib.ExitStack() as stack:
        rows, found = [], []
        for i, zone in enumerate(ZONES):
            home = tmp / f"m{i}"
            home.mkdir()
            app, token = make_app(home)
            url = stack.enter_context(live_server(app))
            found.append((url, token))
            rows.append(f'[[member]]\nname = "m{i}"\nurl = "{url}"\nzone = "{zone}"\npue = 1.2\n'
                        f'token_file = "{home / "quasched.token"}"\n')
        file = tmp / "members.toml"
        file.write_text("\n".join(rows))
        yield file, found


def on_members(found: list[tuple[str, str]]) -> list[str]:
    """The names of every job on the members."""
    return sorted(j["name"] for url, token in found
                  for j in httpx.get(f"{url}{API}/jobs", headers=bearer(token), timeout=10).json())


def submit(front: FrontProcess, name: str, **kw: Any) -> httpx.Response:
    body = {"name": name, "team": "default", "cpu": 4, "memory": "16GiB", "gpus": 1, "duration": 3600, **kw}
    return httpx.post(f"{front.url}{API}/jobs", json=body, headers=bearer(front.token), timeout=10)


def front_job(front: FrontProcess, job_id: int) -> dict[str, Any]:
    return httpx.get(f"{front.url}{API}/jobs/{job_id}", headers=bearer(front.token), timeout=10).json()


@pytest.fixture
def environment(carbon_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUASCHED_CARBON", str(carbon_dir))


def test_kill_9_and_a_restart_on_the_same_store(tmp_path: Path, carbon_dir: Path, environment: None) -> None:
    with members(tmp_path, carbon_dir) as (file, found):
        front = FrontProcess("sqlite:///front.db", tmp_path, file, extra=("--dispatcher", "greedy"))
        front.start()
        try:
            first = submit(front, "first", client_token="c-1")
            assert first.status_code == 201, first.text
            wait_for(lambda: front_job(front, first.json()["id"])["remote"] is not None, 30, "the job is sent")
            assert on_members(found) == ["first"]
            front.kill()
            front.start()  # on the same store: the job is known, sent once, followed to its state there
            wait_for(lambda: front_job(front, first.json()["id"])["state"] == "running", 30, "its state read back")
            again = submit(front, "first", client_token="c-1")
            assert again.json()["id"] == first.json()["id"]
            second = submit(front, "second")
            wait_for(lambda: front_job(front, second.json()["id"])["remote"] is not None, 30, "the second is sent")
            assert on_members(found) == ["first", "second"]
        finally:
            if front.proc is not None and front.proc.poll() is None:
                front.kill()


def test_two_fronts_on_postgresql_the_standby_takes_over(tmp_path: Path, carbon_dir: Path, postgres_url: str,
                                                         environment: None) -> None:
    with members(tmp_path, carbon_dir) as (file, found):
        a_dir, b_dir = tmp_path / "a", tmp_path / "b"
        a_dir.mkdir()
        b_dir.mkdir()
        options = ("--dispatcher", "greedy", "--lease-ttl", "2")
        a = FrontProcess(postgres_url, a_dir, file, extra=options)
        a.start()
        b = FrontProcess(postgres_url, b_dir, file, extra=options)
        (b_dir / b.token_name).write_text(a.token)  # one store, one admin token
        b.start()
        try:
            assert a.ready() and not b.ready()
            refused = submit(b, "to-the-standby")
            assert refused.status_code == 503 and refused.headers["X-Quasched-Leader"] == a.url
            first = submit(a, "first")
            wait_for(lambda: front_job(a, first.json()["id"])["remote"] is not None, 30, "the job is sent")
            a.kill()
            wait_for(b.ready, 60, "the standby takes over")
            wait_for(lambda: front_job(b, first.json()["id"])["state"] == "running", 30, "its state read back")
            second = submit(b, "second")
            assert second.status_code == 201, second.text
            wait_for(lambda: front_job(b, second.json()["id"])["remote"] is not None, 30, "the second is sent")
            assert on_members(found) == ["first", "second"]  # nothing sent twice
        finally:
            for front in (a, b):
                if front.proc is not None and front.proc.poll() is None:
                    front.kill()
