"""What a token reads of another team's jobs, on a real server whose node ``box`` is this machine: a job's command,
env, workdir, client token, exit and output are its team's and admins', on every way out (job, lists, events, the
live stream, the CLI); secret-looking env values are masked for everyone; the database password is never printed
nor served; names with invisible characters and an empty command are 422 naming the field."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

pytestmark = pytest.mark.slow  # a real server running real commands

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from accounts import command_accounts, job_python, shared_dir
from api_support import bearer, job_body, live_server, make_app
from pg import free_port
from serve_process import QUASCHED, ServeProcess

from quasched.cli import app as cli_app
from quasched.model.nodes import NodeSpec
from quasched.policies.registry import parse_spec
from quasched.service.loop.state import LoopOptions

API = "/api/v1"
PY = job_python()
HTTP_S = 30
#: env values the API never shows (their names look secret) and the one only the job's readers see
SECRETS = {"HF_TOKEN": "hf-live-4f9a", "WANDB_API_KEY": "wandb-77c1", "DB_PASSWORD": "pw-0b3e",
           "AWS_SECRET_ACCESS_KEY": "aws-91dd", "GH_CREDENTIALS": "gh-5e20"}
PLAIN = {"DATA_ROOT": "/datasets/vision-private"}
#: in the failing job's argv; what it prints (built at run time: the argv does not hold it)
ARGV_MARK = "argv-mark-31d7"
TAIL_MARK = "tail-mark-8c2e"
CLIENT_TOKEN = "client-token-vision-6a11"
FAILING = f"import sys; print('{ARGV_MARK}'[:0] + '-'.join(['tail', 'mark', '8c2e']), flush=True); sys.exit(3)"
#: ends by SIGTERM's default action (exit -15) when preempted
SLEEPER = "import time; print('up', flush=True); time.sleep(120)"


def box() -> NodeSpec:
    """``box``: this machine, 4 fake T4 GPUs."""
    return NodeSpec(name=np.array(["box"], dtype=object), cpu_milli=np.array([8000]), memory_mib=np.array([32768]),
                    num_gpus=np.array([4]), gpu_model=np.array(["T4"], dtype=object),
                    labels=np.array([{"gpu-memory": "16Gi"}], dtype=object))


def until(check: Any, what: str, timeout: float = 60) -> Any:
    """``check()``'s first truthy answer, polled (an AssertionError naming ``what`` after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while not (answer := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return answer


class World:
    """A live server with teams vision (the jobs' team) and nlp (another team), a token of each and an admin's;
    vision's job ``failed`` exited 3 after printing :data:`TAIL_MARK`, its job ``preempted`` was stopped by nlp's
    high-priority job ``high`` (exit -15, in the ``preempted`` event) and waits again."""

    def __init__(self, base: str, admin: dict[str, str], workdir: Path) -> None:
        self.base, self.workdir = base, workdir
        self.headers = {"admin": admin}
        for team in ("vision", "nlp"):
            assert httpx.put(f"{base}{API}/queues/{team}", json={}, headers=admin, timeout=HTTP_S).status_code == 200
            token = self.post("/tokens", {"name": f"{team}-ci", "team": team}, admin)["token"]
            self.headers[team] = bearer(token)
        vision = self.headers["vision"]
        self.failed = self.post("/jobs", job_body(
            name="finetune", team="vision", cpu=1, memory="1GiB", gpus=0, command=[PY, "-c", FAILING],
            env={**SECRETS, **PLAIN}, workdir=str(workdir), client_token=CLIENT_TOKEN), vision)
        until(lambda: self.get(f"/jobs/{self.failed['id']}")["state"] == "failed", "the failing job failed")
        self.preempted = self.post("/jobs", job_body(name="sweep", team="vision", cpu=1, memory="1GiB", gpus=4,
                                                     priority_class="low", command=[PY, "-c", SLEEPER]), vision)
        until(lambda: "up" in httpx.get(f"{base}{API}/jobs/{self.preempted['id']}/logs", headers=admin,
                                        timeout=HTTP_S).text, "the low-priority job started")
        self.high = self.post("/jobs", job_body(name="urgent", team="nlp", cpu=1, memory="1GiB", gpus=4,
                                                priority_class="high", duration="1h"), self.headers["nlp"])
        until(lambda: self.get(f"/jobs/{self.preempted['id']}")["restarts"] == 1, "the low-priority job preempted")

    def post(self, path: str, body: Any, headers: dict[str, str]) -> Any:
        r = httpx.post(f"{self.base}{API}{path}", json=body, headers=headers, timeout=HTTP_S)
        assert r.status_code == 201, r.text
        return r.json()

    def get(self, path: str, who: str = "admin", **params: Any) -> Any:
        r = httpx.get(f"{self.base}{API}{path}", params=params, headers=self.headers[who], timeout=HTTP_S)
        assert r.status_code == 200, r.text
        return r.json()

    def stream(self, who: str) -> list[dict[str, Any]]:
        """The live stream's replay of every stored event, as ``who`` reads it (up to the last stored one)."""
        last = self.get("/events", limit=1000)[-1]["id"]
        seen: list[dict[str, Any]] = []
        with httpx.stream("GET", f"{self.base}{API}/stream", params={"after": 0}, headers=self.headers[who],
                          timeout=HTTP_S) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if seen[-1]["id"] == last:
                        return seen
        raise AssertionError(f"the stream ended before event {last}")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp, jobs_dir = tmp_path_factory.mktemp("privacy"), shared_dir()
    workdir = jobs_dir / "vision-work"
    workdir.mkdir(mode=0o777)
    workdir.chmod(0o777)  # the team's user enters it
    with pytest.MonkeyPatch.context() as patch, command_accounts("privacy") as accounts:
        patch.setitem(sys.modules, "pynvml", None)  # the fake devices, also on a machine with GPUs
        app, token = make_app(tmp, clock=time.time, cluster=box(), state_dir=tmp / "state",
                              options=LoopOptions(local_node="box", grace_s=2.0, policy=parse_spec("bestfit")),
                              run_as=accounts, jobs_dir=jobs_dir)
        with live_server(app) as base:
            yield World(base, bearer(token), workdir)
    shutil.rmtree(jobs_dir)


#: every way a job's fields leave the server: name -> what the reader reads of it
WAYS = {
    "job": lambda w, who: w.get(f"/jobs/{w.failed['id']}", who),
    "preempted job": lambda w, who: w.get(f"/jobs/{w.preempted['id']}", who),
    "jobs": lambda w, who: w.get("/jobs", who),
    "jobs of the team": lambda w, who: w.get("/jobs", who, team="vision"),
    "failed jobs": lambda w, who: w.get("/jobs", who, state="failed"),
    "events": lambda w, who: w.get("/events", who),
    "events of the job": lambda w, who: w.get("/events", who, job_id=w.preempted["id"]),
    "stream": lambda w, who: w.stream(who),
}
#: fields of a job that only its readers see (null for others)
PRIVATE = ("command", "env", "workdir", "client_token", "exit_code")
#: keys of evidence and event data that only the job's readers see (absent for others)
RUN_KEYS = ("exit_code", "log_tail")


def dicts(value: Any) -> Iterator[dict[str, Any]]:
    """Every dict within ``value``."""
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from dicts(v)
    elif isinstance(value, list):
        for v in value:
            yield from dicts(v)


def vision_jobs(answer: Any, world: World) -> list[dict[str, Any]]:
    ids = {world.failed["id"], world.preempted["id"]}
    return [d for d in dicts(answer) if d.get("id") in ids and "team" in d]


def run_details(answer: Any) -> list[Any]:
    """The values of :data:`RUN_KEYS` in the evidence and event data of ``answer``."""
    return [d[k] for d in dicts(answer) for k in RUN_KEYS if k in d and "state" not in d]


@pytest.mark.parametrize("way", WAYS)
def test_another_team_reads_no_command_env_workdir_exit_nor_output_that_the_team_reads(world, way):
    answer = WAYS[way](world, "nlp")
    text = json.dumps(answer)
    private = [ARGV_MARK, TAIL_MARK, CLIENT_TOKEN, str(world.workdir), *PLAIN.values(), *SECRETS.values()]
    assert [m for m in private if m in text] == []
    for job in vision_jobs(answer, world):
        assert {f: job[f] for f in PRIVATE} == dict.fromkeys(PRIVATE)
        assert job["state"] in ("failed", "pending") and job["cpu"] == 1  # the scheduling facts stay
    assert run_details(answer) == []
    if way == "job":
        assert answer["reason"]["code"] == "NonZeroExit" and answer["reason"]["message"] == "the command failed"
    shown = run_details(WAYS[way](world, "vision"))
    assert -signal.SIGTERM in shown or 3 in shown  # the exit of the failed or preempted run: the team reads it


#: the ways that show a job's env
JOB_WAYS = ["job", "jobs", "jobs of the team", "failed jobs"]


@pytest.mark.parametrize("way", JOB_WAYS)
def test_the_team_reads_them_with_secret_values_masked(world, way):
    answer = WAYS[way](world, "vision")
    assert [s for s in SECRETS.values() if s in json.dumps(answer)] == []
    job = next(j for j in vision_jobs(answer, world) if j["id"] == world.failed["id"])
    assert job["env"] == {**dict.fromkeys(SECRETS, "***"), **PLAIN}
    assert job["command"] == [PY, "-c", FAILING] and job["workdir"] == str(world.workdir)
    assert job["exit_code"] == 3 and job["client_token"] == CLIENT_TOKEN
    assert TAIL_MARK in job["reason"]["evidence"]["log_tail"]


def test_admins_read_them_with_secret_values_masked_and_the_job_gets_them(world):
    job = world.get(f"/jobs/{world.failed['id']}")
    assert job["env"] == {**dict.fromkeys(SECRETS, "***"), **PLAIN}
    assert "exited with code 3" in job["reason"]["message"]
    check = "import os, sys; sys.exit(0 if os.environ['HF_TOKEN'] == 'hf-live-4f9a' else 5)"
    ran = world.post("/jobs", job_body(name="env", team="vision", cpu=1, memory="1GiB", gpus=0,
                                       command=[PY, "-c", check], env=SECRETS), world.headers["vision"])
    assert ran["env"] == dict.fromkeys(SECRETS, "***")  # submit's answer
    done = until(lambda: (j := world.get(f"/jobs/{ran['id']}"))["state"] in ("succeeded", "failed") and j,
                 "the env job ended")
    assert done["state"] == "succeeded", done


def test_the_cli_shows_the_team_its_job_masked_and_another_team_nothing(world):
    def job(who: str) -> str:
        token = world.headers[who]["Authorization"].removeprefix("Bearer ")
        result = CliRunner().invoke(cli_app, ["job", str(world.failed["id"]), "--server", world.base,
                                              "--token", token], env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        return result.output

    mine = job("vision")
    assert "HF_TOKEN=***" in mine and "DATA_ROOT=/datasets/vision-private" in mine and "exit code: 3" in mine
    assert ARGV_MARK in mine and not [s for s in SECRETS.values() if s in mine]
    theirs = job("nlp")
    assert "shown to team vision and admins" in theirs and "the command failed" in theirs
    assert not [m for m in (ARGV_MARK, "DATA_ROOT", "exit code") if m in theirs]


# ---------------------------------------------------------------- names and commands


@pytest.fixture
def plain(tmp_path: Path) -> tuple[TestClient, dict[str, str]]:
    app, token = make_app(tmp_path)
    return TestClient(app), bearer(token)


def test_an_empty_command_is_422_naming_it(plain):
    client, admin = plain
    r = client.post(f"{API}/jobs", json=job_body(command=[]), headers=admin)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "command"]
    assert r.json()["detail"][0]["msg"] == "give the program and its arguments, or leave command out"
    assert client.get(f"{API}/jobs", headers=admin).json() == []


#: bidirectional controls and zero-width characters
INVISIBLE = ["\u202e", "\u202a", "\u2066", "\u2069", "\u200e", "\u200f", "\u061c", "\u200b", "\u200d", "\u2060",
             "\ufeff"]


@pytest.mark.parametrize("char", INVISIBLE, ids=lambda c: f"U+{ord(c):04X}")
@pytest.mark.parametrize("path,method,body,field", [
    ("/jobs", "POST", lambda c: job_body(name=f"train{c}gpt"), "name"),
    ("/jobs", "POST", lambda c: job_body(user=f"ann{c}"), "user"),
    ("/jobs", "POST", lambda c: job_body(app=f"{c}web"), "app"),
    ("/jobs", "POST", lambda c: job_body(client_token=f"ct{c}1"), "client_token"),
    ("/jobs", "POST", lambda c: job_body(gpus=0, command=["true"], workdir=f"/tmp/{c}x"), "workdir"),
    ("/queues/vision", "PUT", lambda c: {"cohort": f"research{c}"}, "cohort"),
    ("/nodes", "POST", lambda c: [{"name": "n9", "cpu": 8, "memory": "32Gi", "labels": {"zone": f"eu{c}1"}}],
     "labels"),
], ids=["name", "user", "app", "client_token", "workdir", "cohort", "labels"])
def test_names_with_invisible_characters_are_422_naming_the_field(plain, char, path, method, body, field):
    client, admin = plain
    r = client.request(method, f"{API}{path}", json=body(char), headers=admin)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"][0] == "body" and detail["loc"][-1] == field, detail
    assert f"U+{ord(char):04X}" in detail["msg"], detail


# ---------------------------------------------------------------- the database password

PASSWORD = "pg-Secret-7f3a"


def test_a_database_that_refuses_never_prints_its_password(tmp_path):
    url = f"postgresql+psycopg://ann:{PASSWORD}@127.0.0.1:{free_port()}/quasched"
    done = subprocess.run([str(QUASCHED), "serve", "--port", str(free_port()), "--db", url], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "cannot start the service on" in out, out
    assert PASSWORD not in out and "ann:***@127.0.0.1" in out, out


def test_a_serving_database_url_hides_its_password_everywhere(tmp_path, postgres_url):
    url = postgres_url.replace("postgres@", f"postgres:{PASSWORD}@")  # local connections are trusted
    server = ServeProcess(url, tmp_path)
    server.start()
    try:
        headers = bearer(server.token)
        answers = [httpx.get(server.url + path, headers=headers, timeout=HTTP_S).text
                   for path in ("/healthz", "/readyz", "/metrics", "/", f"{API}/whoami", f"{API}/snapshot")]
        banner = "".join(server.output)
        assert "postgres:***@" in banner, banner
        assert [a for a in [banner, *answers] if PASSWORD in a] == []
    finally:
        server.kill()
    assert PASSWORD not in "".join(server.output)
