"""``quasched serve`` and the client commands against a real server on 127.0.0.1 (never a traceback)."""

from __future__ import annotations

import asyncio
import importlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_support import live_server, make_app
from typer.testing import CliRunner

from quasched.cli import app
from quasched.service.api.startup import Lifespan, Starting

pytestmark = pytest.mark.slow  # a real quasched serve process

runner = CliRunner()


@pytest.fixture
def server(tmp_path, monkeypatch):
    """(base URL, admin token) of a live server on the small cluster; the CLI runs in an empty directory."""
    service_app, token = make_app(tmp_path / "db", clock=time.time)
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    monkeypatch.delenv("QUASCHED_TOKEN", raising=False)
    monkeypatch.delenv("QUASCHED_SERVER", raising=False)
    with live_server(service_app) as base:
        yield base, token


def cli(*args: str, env: dict[str, str] | None = None):
    result = runner.invoke(app, list(args), env=env)
    assert "Traceback" not in result.output
    return result


def started(front: Starting) -> Any:
    """Serve ``quasched serve``'s app ``front`` as uvicorn would, its start-up then its shutdown: the app it built
    and started, or None if its start failed."""
    async def serve() -> None:
        lifespan = Lifespan(front, {"type": "lifespan", "asgi": {"version": "3.0"}})
        await lifespan.start()
        while front.app is None and front.failure is None:
            await asyncio.sleep(0.01)
        await lifespan.stop()

    asyncio.run(serve())
    return front.app


def test_client_commands(server):
    base, token = server
    env = {"QUASCHED_SERVER": base, "QUASCHED_TOKEN": token}
    r = cli("queue", "vision", "--quota", "A100=16", "--quota", "*=2", "--cohort", "research", env=env)
    assert r.exit_code == 0, r.output
    assert "queue vision" in r.output and "research" in r.output
    r = cli("submit", "--team", "vision", "--gpus", "0.5", "--cpu", "4", "--memory", "16GiB", "--duration", "2h",
            "--name", "resnet-ft", env=env)
    assert r.exit_code == 0, r.output
    assert r.output.startswith("job 1 (resnet-ft) running on ")
    r = cli("submit", "--team", "vision", "--gpus", "8", "--pods", "2", "--name", "huge", "--gpu-model", "A100",
            env=env)
    assert r.exit_code == 0 and "job 2 (huge) pending — " in r.output
    r = cli("jobs", env=env)
    assert r.exit_code == 0 and "resnet-ft" in r.output and "huge" in r.output and "2 jobs" in r.output
    r = cli("jobs", "--state", "pending", env=env)
    assert "huge" in r.output and "resnet-ft" not in r.output
    r = cli("jobs", "--team", "nobody", env=env)
    assert "0 jobs" in r.output
    r = cli("queues", env=env)
    assert r.exit_code == 0 and "vision" in r.output and "A100=16" in r.output and "default" in r.output
    r = cli("nodes", env=env)
    assert r.exit_code == 0 and "4 nodes" in r.output and "a0" in r.output and " 0.5/" in r.output
    r = cli("cancel", "2", "--server", base, env={"QUASCHED_TOKEN": token})
    assert r.exit_code == 0 and "job 2 (huge) cancelled" in r.output
    r = cli("cancel", "2", env=env)
    assert r.exit_code == 2 and "409" in r.output and "already cancelled" in r.output
    r = cli("cancel", "99", env=env)
    assert r.exit_code == 2 and "404" in r.output
    r = cli("jobs", "--state", "bogus", env=env)
    assert r.exit_code == 2 and "422 state:" in r.output


def test_errors_are_clear(server, tmp_path):
    base, token = server
    env = {"QUASCHED_SERVER": base, "QUASCHED_TOKEN": token}
    r = cli("submit", "--team", "default", "--gpus", "1.5", "--name", "x", env=env)
    assert r.exit_code == 2 and "422 gpus:" in r.output and "whole" in r.output
    r = cli("submit", "--team", "default", "--gpus", "1", "--memory", "-3Gi", "--name", "x", env=env)
    assert r.exit_code == 2 and "memory:" in r.output
    r = cli("submit", "--team", "ghosts", "--name", "x", env=env)
    assert r.exit_code == 2 and "team: unknown team 'ghosts'; known: default (an admin adds one" in r.output
    r = cli("jobs", env={"QUASCHED_SERVER": base})  # no token anywhere
    assert r.exit_code == 2 and "401" in r.output and "QUASCHED_TOKEN" in r.output
    r = cli("jobs", env={"QUASCHED_SERVER": base, "QUASCHED_TOKEN": "wrong"})
    assert r.exit_code == 2 and "401" in r.output
    # the token file in the working directory is used when no token is given
    Path("quasched.token").write_text(token + "\n")
    assert cli("jobs", env={"QUASCHED_SERVER": base}).exit_code == 0
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    r = cli("jobs", "--server", f"http://127.0.0.1:{closed}", env={"QUASCHED_TOKEN": token})
    assert r.exit_code == 2 and "cannot connect" in r.output and "quasched serve" in r.output


def test_team_tokens_from_the_cli(server):
    base, token = server
    admin = {"QUASCHED_SERVER": base, "QUASCHED_TOKEN": token}
    for team in ("vision", "nlp"):
        assert cli("queue", team, env=admin).exit_code == 0
    r = cli("token", "vision-ci", "--team", "vision", env=admin)
    assert r.exit_code == 0, r.output
    vision = {"QUASCHED_SERVER": base, "QUASCHED_TOKEN": r.output.strip()}
    assert cli("submit", "--team", "vision", "--name", "ok", env=vision).exit_code == 0
    r = cli("submit", "--team", "nlp", "--name", "theirs", env=vision)
    assert r.exit_code == 2 and "403" in r.output
    r = cli("queue", "vision", "--quota", "A100=100", env=vision)
    assert r.exit_code == 2 and "403" in r.output and "not an admin" in r.output
    assert cli("token", "x", env=admin).exit_code == 2


def test_serve_options(tmp_path, monkeypatch):
    """`quasched serve` with no arguments: ./quasched.db, the built-in cluster, a token file; uvicorn stubbed."""
    monkeypatch.chdir(tmp_path)
    ran = {}
    serve_module = importlib.import_module("quasched.cli.serve")  # the package's `serve` is the command
    monkeypatch.setattr(serve_module, "listen", lambda host, port: ran.update(host=host, port=port))
    monkeypatch.setattr("uvicorn.Server.run", lambda server, sockets: ran.update(app=started(server.config.app)))
    r = cli("serve")
    assert r.exit_code == 0, r.output
    assert ran["host"] == "127.0.0.1" and ran["port"] == 8080
    token = (tmp_path / "quasched.token").read_text().strip()
    assert token not in r.output and f"admin token {token[:4]}…{token[-4:]} saved to quasched.token" in r.output
    assert "dashboard http://127.0.0.1:8080/#token=<the token in quasched.token>" in r.output
    assert "120 nodes, policy guard" in r.output and (tmp_path / "quasched.db").exists()
    ran["app"].state.service.store.close()
    r = cli("serve", "--port", "9000", "--db", "quasched.db")  # a restart: same token, no new one
    assert r.exit_code == 0 and "admin token" not in r.output and ran["port"] == 9000
    ran["app"].state.service.store.close()
    (tmp_path / "c.yaml").write_text("pools:\n  - {name: a, count: 2, cpu: 8, memory: 32Gi}\n")
    r = cli("serve", "--db", str(tmp_path / "other.db"), "--cluster", str(tmp_path / "c.yaml"), "--policy", "bestfit")
    assert r.exit_code == 0 and "2 nodes, policy bestfit" in r.output and "runs the commands" not in r.output
    ran["app"].state.service.store.close()
    r = cli("serve", "--db", str(tmp_path / "other.db"), "--local-node", "a-1", "--state-dir", "st")
    assert r.exit_code == 0 and "runs the commands of jobs placed on node a-1 (this machine)" in r.output
    assert str(tmp_path / "st" / "jobs") in r.output.replace("\n", "")
    ran["app"].state.service.store.close()
    r = cli("serve", "--db", str(tmp_path / "other.db"), "--local-node", "b-9")
    assert r.exit_code == 2 and "--local-node 'b-9': no such node" in r.output
    (tmp_path / "bad.yaml").write_text("pools: []\n")
    r = cli("serve", "--db", str(tmp_path / "third.db"), "--cluster", str(tmp_path / "bad.yaml"))
    assert r.exit_code == 2 and "pools" in r.output
    assert cli("serve", "--policy", "nope").exit_code == 2
    assert cli("serve", "--clock", "sundial").exit_code == 2
    assert cli("serve", "--batch-solver", "magic").exit_code == 2 and "batch-solver" in cli("serve", "--batch-solver", "magic").output


def test_a_port_in_use_fails_before_the_banner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        r = cli("serve", "--port", str(taken.getsockname()[1]))
    assert r.exit_code == 2 and "cannot listen on 127.0.0.1:" in r.output and "in use" in r.output
    assert "quasched serve:" not in r.output and not (tmp_path / "quasched.db").exists()


def test_serve_process_end_to_end(tmp_path):
    """The real command in a subprocess on a free port, then a client command against it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("pools:\n  - {name: g, count: 2, cpu: 32, memory: 128Gi, gpu: {model: A10, count: 4}}\n")
    cmd = [sys.executable, "-m", "quasched.cli", "serve", "--port", str(port), "--cluster", str(cluster)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        env = {**os.environ, "QUASCHED_SERVER": base}
        env.pop("QUASCHED_TOKEN", None)
        out = subprocess.run([sys.executable, "-m", "quasched.cli", "submit", "--team", "default", "--gpus", "2",
                              "--name", "e2e", "--duration", "1s"], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "job 1 (e2e) running on g-" in out.stdout
        for _ in range(50):  # the timer thread finishes it after a second
            state = subprocess.run([sys.executable, "-m", "quasched.cli", "jobs", "--state", "succeeded"],
                                   cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60).stdout
            if "e2e" in state:
                break
            time.sleep(0.2)
        assert "e2e" in state
        assert httpx.get(f"{base}/metrics").status_code == 401  # metrics need a token (or --metrics-public)
        token = (tmp_path / "quasched.token").read_text().strip()
        metrics = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {token}"}).text
        assert "quasched_jobs_finished_total{state=\"succeeded\"} 1.0" in metrics
    finally:
        proc.terminate()
        try:
            output, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    assert "admin token" in output and "Traceback" not in output


def test_serve_virtual_clock_matches_the_replay():
    result = runner.invoke(app, ["serve", "--clock", "virtual", "--trace", "synthetic", "--policy", "bestfit"])
    assert result.exit_code == 0, result.output
    assert "1,000 of 1,000 jobs started" in result.output
    assert "identical to `quasched replay` (node and start time of every pod): yes" in result.output


def test_submit_sends_a_client_token_and_a_retry_never_duplicates(server, monkeypatch):
    base, token = server
    env = {"QUASCHED_SERVER": base, "QUASCHED_TOKEN": token}
    real, lost = httpx.request, []

    def reply_lost_once(method, url, **kw):  # the server gets the submit, its reply never arrives
        response = real(method, url, **kw)
        if method == "POST" and url.endswith("/jobs") and not lost:
            lost.append(kw["json"]["client_token"])
            raise httpx.ReadTimeout("the reply was lost")
        return response

    monkeypatch.setattr(httpx, "request", reply_lost_once)
    r = cli("submit", "--name", "once", "--gpus", "1", env=env)
    assert r.exit_code == 0 and "job 1 (once) running" in r.output and "trying again" in r.output
    monkeypatch.setattr(httpx, "request", real)
    assert cli("submit", "--name", "twice", env=env).exit_code == 0
    jobs = httpx.get(f"{base}/api/v1/jobs", headers={"Authorization": f"Bearer {token}"}).json()
    assert [j["name"] for j in jobs] == ["twice", "once"]
    assert jobs[1]["client_token"] == lost[0] and jobs[0]["client_token"] not in (None, lost[0])


def test_job_complete_priority_class_and_positions_from_the_cli(server):
    base, token = server
    env = {"QUASCHED_SERVER": base, "QUASCHED_TOKEN": token}
    for name in ("first", "second", "third"):
        r = cli("submit", "--name", name, "--gpus", "8", "--gpu-model", "A100", "--priority-class", "high", env=env)
        assert r.exit_code == 0, r.output
    assert cli("submit", "--name", "x", "--priority", "high", env=env).exit_code == 2  # one name: --priority-class
    r = cli("jobs", "--state", "pending", env=env)
    assert "third" in r.output and "│   1 │" in r.output  # queue position 1
    r = cli("job", "1", env=env)
    assert r.exit_code == 0 and "job 1 (first) running, team default, high" in r.output
    assert " submitted" in r.output and " started a" in r.output
    r = cli("complete", "1", "--failed", env=env)
    assert r.exit_code == 0 and "job 1 (first) failed" in r.output
    r = cli("job", "3", env=env)
    assert "job 3 (third) running" in r.output and "succeeded" not in r.output
    r = cli("complete", "99", env=env)
    assert r.exit_code == 2 and "404" in r.output
